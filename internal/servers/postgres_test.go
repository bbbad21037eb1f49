package servers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func pgConnect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t, 10*time.Second), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func pgCount(ctx context.Context, url string) (int, error) {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	var n int
	err = c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
	return n, err
}

func TestSharedPostgres(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	c := pgConnect(t, p.URL(db))
	var who string
	if err := c.QueryRow(ctxT(t, 10*time.Second), "SELECT current_user").Scan(&who); err != nil || who != "postgres" {
		t.Fatalf("current_user %q, %v", who, err)
	}
}

// A server survives a pause (requests hang, then are answered), a crash with its
// committed rows, and a restart that wipes its data.
func TestPostgresKillRestartPause(t *testing.T) {
	t.Parallel()
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	addr := p.Addr()
	db := servertest.PostgresDatabase(t, p)
	ctx := ctxT(t, 2*time.Minute)
	if err := p.Exec(ctx, db, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	open := pgConnect(t, p.URL(db)) // its session (a backend process of its own) pauses too
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := pgCount(pctx, p.URL(db))
	cancel()
	if err == nil {
		t.Fatal("query answered while paused")
	}
	pctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	err = open.Ping(pctx)
	cancel()
	if err == nil {
		t.Fatal("an open session answered while paused")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if n, err := pgCount(ctx, p.URL(db)); err != nil || n != 1 {
		t.Fatalf("after resume: count %d, %v", n, err)
	}

	open = pgConnect(t, p.URL(db))
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := open.Ping(ctx); err == nil {
		t.Fatal("a session survived the server's crash")
	}
	t0 := time.Now()
	if err := p.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("postgres restart (keep data, crash recovery) in %v", time.Since(t0).Round(time.Millisecond))
	if p.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", p.Addr(), addr)
	}
	if n, err := pgCount(ctx, p.URL(db)); err != nil || n != 1 {
		t.Fatalf("after the crash: count %d, %v", n, err)
	}

	// A session's end on Stop: a fast shutdown ends connected sessions at once.
	c := pgConnect(t, p.URL(db))
	t0 = time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("Stop with a session open took %v", took)
	}
	if err := c.Ping(ctx); err == nil {
		t.Error("a session survived Stop")
	}
	if err := p.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pgCount(ctx, p.URL(db)); err == nil {
		t.Fatal("the database survived a restart that wipes the data")
	}
}

// An asynchronous replica keeps up; held back (PauseReplication), it misses what
// the primary commits meanwhile, and promoted after the primary's death it serves
// without it.
func TestPostgresReplicaPair(t *testing.T) {
	t.Parallel()
	primary, replica := servertest.PostgresReplicaPair(t, false)
	ctx := ctxT(t, 2*time.Minute)
	if err := primary.Exec(ctx, "", "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := replica.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := pgCount(ctx, replica.URL("postgres")); err != nil || n != 1 {
		t.Fatalf("replica: count %d, %v", n, err)
	}
	if err := replica.PauseReplication(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, "", "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := pgCount(ctx, replica.URL("postgres")); err != nil || n != 1 {
		t.Fatalf("promoted replica: count %d (want 1: the row committed while it lagged is lost), %v", n, err)
	}
	if err := replica.Exec(ctx, "", "INSERT INTO t VALUES (3)"); err != nil {
		t.Fatalf("the promoted replica refuses writes: %v", err)
	}
}

// A synchronous replica has every commit the primary acknowledged: paused
// (its replay held), it still gets them, and promoted it applies them.
func TestPostgresSyncReplicaPair(t *testing.T) {
	t.Parallel()
	primary, replica := servertest.PostgresReplicaPair(t, true)
	ctx := ctxT(t, 2*time.Minute)
	if err := primary.Exec(ctx, "", "CREATE TABLE t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if err := replica.WaitInSync(ctx); err != nil { // flushed there, and now applied too
		t.Fatal(err)
	}
	if err := replica.PauseReplication(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.Exec(ctx, "", "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if n, err := pgCount(ctx, replica.URL("postgres")); err != nil || n != 0 {
		t.Fatalf("a paused replica applied a commit: count %d, %v", n, err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := pgCount(ctx, replica.URL("postgres")); err != nil || n != 1 {
		t.Fatalf("promoted synchronous replica: count %d (want 1), %v", n, err)
	}
}

// A transaction-pooling pgbouncer passes statements through, and hands a client
// another server session between transactions.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	b := servertest.PgBouncer(t, p.Addr(), "transaction")
	ctx := ctxT(t, time.Minute)
	conns := servertest.PooledConns(t, b, "postgres", 2)
	a, other := conns[0], conns[1]
	var p1, p2, busy uint32
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p1); err != nil {
		t.Fatal(err)
	}
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&busy); err != nil {
		t.Fatal(err)
	}
	if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p2); err != nil {
		t.Fatal(err)
	}
	if busy != p1 || p2 == p1 {
		t.Errorf("client a ran on server session %d, then %d while another client's transaction held %d: want the pooler to have moved it", p1, p2, busy)
	}
	if a.PgConn().PID() == p1 {
		t.Errorf("the pooler's cancel key names the server session %d", p1)
	}
	// Session state does not follow the client: a pooler in transaction mode does not pin.
	var pgErr *pgconn.PgError
	if _, err := a.Exec(ctx, "SELECT 1/0"); !errors.As(err, &pgErr) {
		t.Errorf("an error through the pooler: %v", err)
	}
}

// Under DLOCK_SERVERS=docker (containers only) a server kind without an image —
// PgBouncer has no official one — is not started as a local process: its Start
// function says so with a *NoImageError.
func TestPgBouncerNoImage(t *testing.T) {
	t.Setenv(servers.EnvServers, "docker")
	t.Setenv(servers.PgBouncerImage.Env, "")
	if _, err := servers.StartPgBouncer(ctxT(t, 10*time.Second), "127.0.0.1:1", "transaction"); !servers.IsNoImage(err) {
		t.Errorf("StartPgBouncer: %v; want a *NoImageError", err)
	}
}
