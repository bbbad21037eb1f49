package pglock_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// pooled starts a private server with a fresh database, its tables made, and a
// pgbouncer in front of it pooling in mode; it returns the server, the database and
// the pooler.
func pooled(t *testing.T, mode string) (*servers.Postgres, string, *servers.PgBouncer) {
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin, pglock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	b := servertest.PgBouncer(t, p.Addr(), mode)
	t.Cleanup(func() {
		if t.Failed() { // what the pooler said (its log goes with it)
			log, _ := os.ReadFile(b.LogPath())
			t.Logf("pgbouncer's log:\n%s", tail(string(log), 30))
		}
	})
	return p, db, b
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// The trap itself, as users meet it: session advisory locks through PgBouncer in
// transaction mode. Two clients both "hold" one lock: the first client's lock stays
// with the server session it ran on, which the pooler hands to the second client,
// and advisory locks are re-entrant in a session. (If this stops reproducing, the
// pooler pins sessions, and the rest of this file's premise is gone.)
func TestPoolerTrap(t *testing.T) {
	_, db, b := pooled(t, "transaction")
	ctx := ctxFor(t, 30*time.Second)
	conns := servertest.PooledConns(t, b, db, 2)
	a, c := conns[0], conns[1]
	var gotA, gotC bool
	if err := a.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&gotA); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock(42)").Scan(&gotC); err != nil {
		t.Fatal(err)
	}
	if !gotA || !gotC {
		t.Fatalf("through a transaction pooler: client a got the lock: %v, client c got it too: %v; want both (the trap)", gotA, gotC)
	}
}

// postgres+advisory:// refuses a transaction-pooling PgBouncer at Open, with
// ErrPooler and an error that says what it saw and what to do; a Locker built on a
// pool through it refuses every attempt. Through a session-pooling PgBouncer, which
// pins a client to one server session, it works.
func TestAdvisoryRefusesTransactionPooler(t *testing.T) {
	_, db, b := pooled(t, "transaction")
	u := lockURL(pglock.AdvisoryScheme, b.Addr(), db, "")
	_, err := dlock.Open(ctxFor(t, 30*time.Second), u)
	if !errors.Is(err, pglock.ErrPooler) {
		t.Fatalf("Open through a transaction pooler: want ErrPooler, got %v", err)
	}
	for _, want := range []string{"transaction", "cancel key", "postgres://"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)

	l := pglock.NewAdvisory(pool(t, b.URL(db)))
	defer l.Close()
	if _, err := l.TryAcquire(ctxFor(t, 30*time.Second), "pooled"); !errors.Is(err, pglock.ErrPooler) {
		t.Fatalf("NewAdvisory through a transaction pooler: TryAcquire: want ErrPooler, got %v", err)
	}
	if _, err := l.Acquire(ctxFor(t, 30*time.Second), "pooled"); !errors.Is(err, pglock.ErrPooler) {
		t.Fatalf("NewAdvisory through a transaction pooler: Acquire: want ErrPooler, got %v", err)
	}
}

func TestAdvisoryThroughSessionPooler(t *testing.T) {
	_, db, b := pooled(t, "session")
	l := servertest.Open(t, lockURL(pglock.AdvisoryScheme, b.Addr(), db, ""))
	other := servertest.Open(t, lockURL(pglock.AdvisoryScheme, b.Addr(), db, ""))
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), "session-pooled")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctxFor(t, 10*time.Second), "session-pooled"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a second client through the session pooler: want ErrNotAcquired, got %v", err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// The lease table works through a transaction-pooling PgBouncer: the whole suite
// holds (each statement stands alone; waiters poll, LISTEN cannot pass the pooler,
// and statements run unnamed: a statement prepared on one server session is unknown
// to the next).
func TestConformanceThroughTransactionPooler(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "table", true: "table-fifo"}[fifo], func(t *testing.T) {
			p, db, b := pooled(t, "transaction")
			h := &tableHarness{url: lockURL(pglock.Scheme, b.Addr(), db, fifoQuery(fifo)), admin: pool(t, p.URL(db)), fifo: fifo,
				name: map[bool]string{false: "postgres (PgBouncer, transaction pooling)", true: "postgres (PgBouncer, transaction pooling, fifo)"}[fifo]}
			conformance.Run(t, h)
		})
	}
}

// A Locker built by New on a pool through a transaction pooler finds it at its first
// lock and turns its notifications off; its waiters still get the lock promptly.
func TestTableConstructorThroughTransactionPooler(t *testing.T) {
	_, db, b := pooled(t, "transaction")
	cfg, err := pgxpool.ParseConfig(b.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	p, err := pgxpool.NewWithConfig(ctxFor(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, c := pglock.New(p), pglock.New(p)
	defer a.Close()
	defer c.Close()
	ls, err := a.Acquire(ctxFor(t, 10*time.Second), "pooled", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lc, err := c.Acquire(ctxFor(t, 30*time.Second), "pooled", dlock.WithTTL(time.Minute))
		if err == nil {
			err = lc.Release(ctxFor(t, 10*time.Second))
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter start waiting (what it waits for is not visible from here)
	released := time.Now()
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("the waiter got the lock %v after its release", d)
	}
}
