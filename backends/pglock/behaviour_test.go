package pglock_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// The shared checks of locktest, under the names this package's tests use.
var (
	tryAcquire = locktest.TryAcquire
	wantCause  = locktest.WantCause
	wantHeld   = locktest.WantHeld
	release    = locktest.Release
)

// countingConn counts the writes of one connection: pgx sends each statement of an
// uncontended lock (bind and execute of a prepared statement, then sync) in one
// write, and waits for its answer: a write is a round trip.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// countingPool returns a pool of cfg whose connections count their writes in
// writes (closed when t ends).
func countingPool(t *testing.T, cfg *pgxpool.Config, writes *atomic.Int64) *pgxpool.Pool {
	t.Helper()
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, writes}, nil
	}
	pl, err := pgxpool.NewWithConfig(ctxFor(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	return pl
}

// migratedConfig makes a fresh database on the shared server, with the tables, and
// returns a pool configuration for it.
func migratedConfig(t *testing.T) *pgxpool.Config {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), pool(t, p.URL(db))); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(p.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Acquire, Refresh and Release of the lease table are one statement, one round trip
// each: a pool of one connection writes 3 times per acquire+refresh+release cycle
// once its statements are prepared.
func TestOneRoundTripPerCall(t *testing.T) {
	cfg := migratedConfig(t)
	var writes atomic.Int64
	cfg.MaxConns = 1
	l := pglock.New(countingPool(t, cfg, &writes))
	defer l.Close()
	cycle := func() { locktest.RefreshCycle(t, l, "roundtrips") }
	cycle() // prepares the statements (and looks for a pooler)
	const n = 10
	before := writes.Load()
	for range n {
		cycle()
	}
	if got := writes.Load() - before; got != 3*n {
		t.Errorf("%d acquire+refresh+release cycles: %d round trips, want %d", n, got, 3*n)
	}
}

// Expiry is judged by the server's clock alone: a client whose session lives 14
// hours ahead (time zone Pacific/Kiritimati) cannot take over a live lock, and its
// own locks expire after their TTL.
func TestClientTimeZoneIsIrrelevant(t *testing.T) {
	cfg := migratedConfig(t)
	cfg.ConnConfig.RuntimeParams["timezone"] = "Pacific/Kiritimati"
	skewedPool, err := pgxpool.NewWithConfig(ctxFor(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer skewedPool.Close()
	normal, skewed := pglock.New(pool(t, cfg.ConnString())), pglock.New(skewedPool)
	defer normal.Close()
	defer skewed.Close()
	locktest.ServerClockExpiry(t, normal, skewed, "tz", "in a time zone 14h ahead")
}

// A held lock and its key's token survive a crash and restart of the server.
func TestServerRestart(t *testing.T) {
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	db := servertest.PostgresDatabase(t, p)
	u := lockURL(pglock.Scheme, p.Addr(), db, "")
	a, b := servertest.Open(t, u), servertest.Open(t, u)
	la := tryAcquire(t, a, "restart/held", dlock.WithTTL(time.Minute))
	servertest.CrashAndRestart(t, p)
	wantHeld(t, b, "restart/held", "after the server restarted")
	release(t, la) // still ours: the owner's release works
	lb := tryAcquire(t, b, "restart/held")
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after the restart, not above %d from before it", lb.Token(), la.Token())
	}
	release(t, lb)
}

// noCheck is a check interval no test waits for: a lease that ends in such a test
// learned of its session's end from its connection, not from a check.
const noCheck = time.Hour

func advisoryNoCheck(t testing.TB, p *servers.Postgres, db string) dlock.Locker {
	return servertest.Open(t, lockURL(pglock.AdvisoryScheme, p.Addr(), db, "check_interval=1h"))
}

// An advisory lock does not survive a server restart: the holder's lease ends with
// ErrLost as the server dies — before the server is back, without waiting for a
// check — and another client takes the lock once it is.
func TestAdvisoryServerRestart(t *testing.T) {
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	db := servertest.PostgresDatabase(t, p)
	a, b := advisoryNoCheck(t, p, db), advisoryNoCheck(t, p, db)
	locktest.SessionLockDiesWithServer(t, a, b, "restart/advisory", noCheck, p.Kill,
		func() error { return p.Restart(ctxFor(t, time.Minute), true) })
}

// When the session holding an advisory lease is terminated (pg_terminate_backend),
// the lock is free at once and the lease ends with ErrLost as the server closes the
// connection, without waiting for a check.
func TestAdvisoryTerminatedSession(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin); err != nil {
		t.Fatal(err)
	}
	a, b := advisoryNoCheck(t, p, db), advisoryNoCheck(t, p, db)
	la := tryAcquire(t, a, "terminate/advisory")
	terminateHolder(t, admin, "terminate/advisory")
	killed := time.Now()
	lb := tryAcquire(t, b, "terminate/advisory")
	select {
	case <-la.Done():
		t.Logf("lease ended %v after the session was terminated", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease did not end within 10s of its session's end (check interval %v)", noCheck)
	}
	if !errors.Is(la.Err(), dlock.ErrLost) || !strings.Contains(la.Err().Error(), "closed by the server") {
		t.Errorf("Err: want ErrLost saying the server closed the connection, got %v", la.Err())
	}
	wantCause(t, la, dlock.CauseSession)
	release(t, lb)
}

// A cancelled advisory wait leaves nothing behind, however close the cancel comes
// to the holder's release: the wait is cancelled on the server, and a lock granted
// meanwhile is unlocked before Acquire returns. 30 trials of: a holder, a waiter in
// the server's queue, the waiter's ctx cancelled, the holder's release at once,
// then a third client's TryAcquire, which must be granted.
func TestAdvisoryCancelledWaitLeavesNothing(t *testing.T) {
	h := newAdvisoryHarness(t)
	holder, waiter, third := h.NewLocker(t), h.NewLocker(t), h.NewLocker(t)
	for i := range 30 {
		key := "cancel/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		lh := tryAcquire(t, holder, key)
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() {
			ls, err := waiter.Acquire(ctx, key)
			if err == nil {
				_ = ls.Release(ctxFor(t, 10*time.Second))
				err = errors.New("granted")
			}
			got <- err
		}()
		for end := time.Now().Add(10 * time.Second); h.Waiting(t, key) < 1; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("trial %d: the waiter is not waiting on the server", i)
			}
		}
		cancel()
		release(t, lh)
		err := <-got
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("trial %d: the cancelled Acquire: want context.Canceled, got %v", i, err)
		}
		release(t, tryAcquire(t, third, key))
	}
}

// Two keys whose candidate ids collide get different locks: the registry gives the
// second key its next candidate. (The hash is made to collide: every key's first
// candidate is 7.)
func TestRegistryCollision(t *testing.T) {
	defer pglock.SetCandidate(func(key string, i int) int64 {
		if i == 0 {
			return 7
		}
		return pglock.AdvisoryID(key) + int64(i)
	})()
	h := newAdvisoryHarness(t)
	a, b := h.NewLocker(t), h.NewLocker(t)
	la := tryAcquire(t, a, "collide/one")
	lb := tryAcquire(t, b, "collide/two") // a shared id would refuse it
	if id1, id2 := lockIDOf(t, h.admin, "collide/one"), lockIDOf(t, h.admin, "collide/two"); id1 != 7 || id2 == 7 {
		t.Errorf("registered ids %d and %d: want 7 for the first key, another for the second", id1, id2)
	}
	wantHeld(t, b, "collide/one", "the first key, held")
	wantHeld(t, a, "collide/two", "the second key, held")
	release(t, la)
	release(t, lb)
	// A third client (no memory of the ids) finds the same ones.
	c := h.NewLocker(t)
	lc := tryAcquire(t, c, "collide/two")
	wantHeld(t, a, "collide/two", "the second key, taken by a client that looked its id up")
	release(t, lc)
}

// Every URL parameter is checked against its bounds: a value outside them (or of
// the wrong form) is ErrInvalidURL naming the parameter, from Declared (which
// contacts no server) as from Open.
func TestURLParameters(t *testing.T) {
	base := map[string]string{"postgres": "postgres://u:pw@127.0.0.1:1/db", "advisory": "postgres+advisory://u:pw@127.0.0.1:1/db"}
	bad := []struct{ kind, query, names string }{
		{"postgres", "connect_timeout=50ms", "connect_timeout"},
		{"postgres", "connect_timeout=2m", "connect_timeout"},
		{"postgres", "max_conns=0", "max_conns"},
		{"postgres", "max_conns=1001", "max_conns"},
		{"postgres", "fifo=maybe", "fifo"},
		{"postgres", "table=", "want 1 to 53 bytes"},
		{"postgres", "table=" + strings.Repeat("t", 54), "want 1 to 53 bytes"},
		{"postgres", "sslmode=prefer", "sslmode"},
		{"postgres", "sslmode=require&tls=true", "sslmode and tls"},
		{"postgres", "sslmode=require&tls_ca=/nonexistent", "tls_ca"},
		{"postgres", "sslmode=verify-ca&tls_server_name=x", "tls_server_name"},
		{"postgres", "session_timeout=5s", "session_timeout"}, // an advisory parameter
		{"advisory", "session_timeout=500ms", "session_timeout"},
		{"advisory", "session_timeout=25h", "session_timeout"},
		{"advisory", "check_interval=1ms", "check_interval"},
		{"advisory", "check_interval=2h", "check_interval"},
		{"advisory", "registry=" + strings.Repeat("r", 64), "want 1 to 63 bytes"},
		{"advisory", "fifo=true", "fifo"}, // a table parameter
	}
	for _, c := range bad {
		u := base[c.kind] + "?" + c.query
		_, err := dlock.Declared(mustParse(t, u))
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), c.names) || strings.Contains(err.Error(), "pw@") {
			t.Errorf("Declared(…?%s) = %v; want ErrInvalidURL naming %s", c.query, err, c.names)
		}
	}
	for _, u := range []string{"postgres://127.0.0.1:1/db", "postgres://u@127.0.0.1:0/db", "postgres://u@h1:1,h2:2/db", "postgres://u@127.0.0.1:1/a/b", "postgres://u@/db"} {
		if _, err := dlock.Declared(mustParse(t, u)); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Declared(%s) = %v; want ErrInvalidURL", u, err)
		}
	}
	for _, q := range []string{"", "sslmode=disable", "sslmode=require", "sslmode=verify-full", "connect_timeout=100ms&max_conns=1000", "table=locks&fifo=true"} {
		if _, err := dlock.Declared(mustParse(t, base["postgres"]+"?"+q)); err != nil {
			t.Errorf("Declared(…?%s): %v", q, err)
		}
	}
	c, err := dlock.Declared(mustParse(t, base["advisory"]+"?session_timeout=2s"))
	if err != nil || c.SessionTimeout != 2*time.Second || len(c.Inapplicable) != 0 {
		t.Errorf("advisory with session_timeout=2s: %+v, %v", c, err)
	}
	c, err = dlock.Declared(mustParse(t, base["advisory"]))
	if err != nil || c.SessionTimeout < 2*time.Hour || len(c.Inapplicable) != 2 {
		t.Errorf("advisory without session_timeout: declared %v session timeout, inapplicable %v (%v); want hours and HolderPause, Partition", c.SessionTimeout, c.Inapplicable, err)
	}
}

func mustParse(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// The deployment check reads what decides the locks' fate: fsync and
// synchronous_commit, the standbys and whether commits wait for one, the session
// timeout of the advisory mode, and a pooler in front of the server.
func TestInspect(t *testing.T) {
	p := servertest.Postgres(t) // the test servers run with fsync=off
	db := servertest.PostgresDatabase(t, p)
	f := servertest.Findings(t, lockURL(pglock.Scheme, p.Addr(), db, ""))
	expect := func(f map[string]spec.Finding, topic string, exposed bool, says string) {
		t.Helper()
		got, ok := f[topic]
		switch {
		case !ok:
			t.Errorf("no %s finding in %v", topic, f)
		case got.Exposed != exposed || !strings.Contains(got.Setting+" "+got.Detail, says):
			t.Errorf("%s: exposed %v (%s: %s); want exposed %v, saying %q", topic, got.Exposed, got.Setting, got.Detail, exposed, says)
		}
	}
	expect(f, string(spec.ServerRestart), true, "fsync=off")
	expect(f, string(spec.Failover), false, "no standby")
	expect(f, string(spec.MutualExclusion), false, "PostgreSQL itself")
	expect(f, string(spec.ClockJump), true, "statement_timestamp")
	a := servertest.Findings(t, lockURL(pglock.AdvisoryScheme, p.Addr(), db, ""))
	expect(a, string(spec.HolderCrash), true, "idle_session_timeout=0")
	a = servertest.Findings(t, lockURL(pglock.AdvisoryScheme, p.Addr(), db, "session_timeout=5s"))
	expect(a, string(spec.HolderCrash), false, "idle_session_timeout=5s")

	t.Run("replicas", func(t *testing.T) {
		primary, _ := servertest.PostgresReplicaPair(t, false)
		expect(servertest.Findings(t, lockURL(pglock.Scheme, primary.Addr(), "postgres", "")), string(spec.Failover), true, "asynchronously")
		expect(servertest.Findings(t, lockURL(pglock.AdvisoryScheme, primary.Addr(), "postgres", "")), string(spec.Failover), true, "not replicated")
		syncPrimary, replica := servertest.PostgresReplicaPair(t, true)
		expect(servertest.Findings(t, lockURL(pglock.Scheme, syncPrimary.Addr(), "postgres", "")), string(spec.Failover), false, "synchronous standby")
		expect(servertest.Findings(t, lockURL(pglock.Scheme, replica.Addr(), "postgres", "")), string(spec.Failover), true, "reaches a standby")
	})
	t.Run("pooler", func(t *testing.T) {
		_, db, b := pooled(t, "transaction")
		expect(servertest.Findings(t, lockURL(pglock.AdvisoryScheme, b.Addr(), db, "")), string(spec.MutualExclusion), true, "exclusion silently ends")
		expect(servertest.Findings(t, lockURL(pglock.Scheme, b.Addr(), db, "")), string(spec.MutualExclusion), false, "works through it")
	})
}

// A holder cut off from its server without a word (a link that drops every byte)
// gives its advisory lease up when a check gets no answer within
// driver.SessionAnswerWait, before the server may free the lock
// (idle_session_timeout after the last answered check): the
// lease ends with ErrLost, cause CauseUnreachable, before the server frees the lock.
func TestAdvisorySilentLoss(t *testing.T) {
	const idle = 2 * time.Second
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	px := servertest.Proxy(t, p.Addr())
	a := servertest.Open(t, lockURL(pglock.AdvisoryScheme, px.Addr(), db, "check_interval=100ms&session_timeout="+idle.String()))
	la := tryAcquire(t, a, "silent/advisory")
	silent := time.Now() // the last answered check came before this
	px.Blackhole()
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease did not end within 10s of its link going silent (check interval 100ms)")
	}
	if took := time.Since(silent); took >= idle {
		t.Errorf("the lease ended %v after its link went silent: the server may free the lock after %v", took, idle)
	}
	if !errors.Is(la.Err(), dlock.ErrLost) {
		t.Errorf("Err: want ErrLost, got %v", la.Err())
	}
	wantCause(t, la, dlock.CauseUnreachable)
	px.Restore()
}

// TestAdvisorySlowAnswerIsNotALoss: a check whose answer comes late (a link, or a
// machine, slower than the check interval) does not end the lease while the server
// keeps the session: the answer is awaited up to driver.SessionAnswerWait, well before the server may
// free the lock. The link holds a check's ping for five intervals; the lease is
// still held afterwards and releases normally. (Waiting for one interval, as the
// checks once did, lost it: the full campaign's TestConformanceTLS/advisory.)
func TestAdvisorySlowAnswerIsNotALoss(t *testing.T) {
	const check = 100 * time.Millisecond
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	px := servertest.Proxy(t, p.Addr())
	a := servertest.Open(t, lockURL(pglock.AdvisoryScheme, px.Addr(), db, "session_timeout=2s&check_interval="+check.String()))
	locktest.SlowAnswerIsNotALoss(t, tryAcquire(t, a, "slow/advisory"), px, check)
}

// TestAdvisoryReleaseHonoursCtx: Release returns by its context even while a check
// uses the lease's connection (a ping stuck on a link that does not deliver): it
// does not wait for the check to end, which takes up to a check interval. The
// lease is then as it was, and released once the link delivers again.
func TestAdvisoryReleaseHonoursCtx(t *testing.T) {
	const check = 5 * time.Second
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	px := servertest.Proxy(t, p.Addr())
	l := servertest.Open(t, lockURL(pglock.AdvisoryScheme, px.Addr(), db, "check_interval="+check.String()))
	locktest.ReleaseHonoursCtx(t, tryAcquire(t, l, "release-ctx/advisory"), px, check)
}
