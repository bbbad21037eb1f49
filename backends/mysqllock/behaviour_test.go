package mysqllock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/closetest"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/measure"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// The shared checks of locktest, under the names this package's tests use.
var (
	tryAcquire = locktest.TryAcquire
	wantHeld   = locktest.WantHeld
	release    = locktest.Release
)

// A held lock and every key's token survive a crash and restart of the server: the
// lock is still held afterwards, its owner can still release it, and later grants
// get larger tokens than any before the crash.
func TestServerRestart(t *testing.T) {
	m := servertest.NewMySQL(t, servers.MySQLOptions{})
	dsn := servertest.NewDatabase(t, m)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, dsn, nil)); err != nil {
		t.Fatal(err)
	}
	a, b := mysqllock.New(openDB(t, dsn, nil)), mysqllock.New(openDB(t, dsn, nil))
	defer a.Close()
	defer b.Close()

	held, free := "restart/held", "restart/free"
	var last uint64
	for range 3 { // the free key's token climbs to 3, and its row is released
		ls := tryAcquire(t, a, free)
		last = ls.Token()
		release(t, ls)
	}
	la := tryAcquire(t, a, held, dlock.WithTTL(time.Minute))

	servertest.CrashAndRestart(t, m)

	wantHeld(t, b, held, "after the server restarted")
	release(t, la) // still ours: the owner's release works
	lb := tryAcquire(t, b, held)
	if lb.Token() <= la.Token() {
		t.Errorf("%q: token %d after the restart, not above %d from before it", held, lb.Token(), la.Token())
	}
	release(t, lb)
	lf := tryAcquire(t, b, free)
	if lf.Token() <= last {
		t.Errorf("%q: token %d after the restart, not above %d from before it", free, lf.Token(), last)
	}
	release(t, lf)
}

// noCheck is a check interval no test waits for: a lease that ends in such a test
// learned of its session's end from its connection, not from a check.
const noCheck = time.Hour

// A GET_LOCK lock does not survive a server restart: the holder's lease ends with
// ErrLost as the server process dies — before the server is back, without waiting
// for a check — and another client takes the lock once it is.
func TestGetLockServerRestart(t *testing.T) {
	m := servertest.NewMySQL(t, servers.MySQLOptions{})
	dsn := servertest.NewDatabase(t, m)
	a := mysqllock.NewGetLock(openDB(t, dsn, nil), mysqllock.WithCheckInterval(noCheck))
	b := mysqllock.NewGetLock(openDB(t, dsn, nil))
	defer a.Close()
	defer b.Close()

	locktest.SessionLockDiesWithServer(t, a, b, "restart/getlock", noCheck, m.Kill,
		func() error { return m.Restart(ctxFor(t, time.Minute), true) })
}

// When the connection holding a GET_LOCK lease is killed, the lock is free at once
// and the lease ends with ErrLost as the server closes the connection, without
// waiting for a check.
func TestGetLockKilledConnection(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	admin := openDB(t, dsn, nil)
	a := mysqllock.NewGetLock(openDB(t, dsn, nil), mysqllock.WithCheckInterval(noCheck))
	b := mysqllock.NewGetLock(openDB(t, dsn, nil))
	defer a.Close()
	defer b.Close()

	const key = "kill/getlock"
	la := tryAcquire(t, a, key)
	killHolder(t, admin, key)
	killed := time.Now()
	lb := tryAcquire(t, b, key)
	select {
	case <-la.Done():
		t.Logf("lease ended %v after the kill", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the lease did not end within 10s of its connection's death (check interval %v)", noCheck)
	}
	if !errors.Is(la.Err(), dlock.ErrLost) {
		t.Errorf("Err: want ErrLost, got %v", la.Err())
	}
	release(t, lb)
}

// Expiry is judged by the server's clock alone: a client whose session clock reads 13
// hours ahead (time_zone '+13:00', so NOW() is 13 hours past UTC) cannot take over a
// live lock, and its own locks expire after their TTL, not 13 hours off.
func TestSkewedClientCannotTakeOver(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, dsn, nil)); err != nil {
		t.Fatal(err)
	}
	skewedDB := openDB(t, dsn, func(c *mysql.Config) { c.Params = map[string]string{"time_zone": "'+13:00'"} })
	var skew int
	if err := skewedDB.QueryRowContext(ctxFor(t, 10*time.Second), "SELECT TIMESTAMPDIFF(HOUR, UTC_TIMESTAMP(), NOW())").Scan(&skew); err != nil {
		t.Fatal(err)
	}
	if skew != 13 {
		t.Fatalf("the skewed session's NOW() is %dh from UTC, want 13h", skew)
	}
	normal, skewed := mysqllock.New(openDB(t, dsn, nil)), mysqllock.New(skewedDB)
	defer normal.Close()
	defer skewed.Close()

	locktest.ServerClockExpiry(t, normal, skewed, "skew", "13h ahead")
}

// The documented limit of server-clock expiry: a session that sets @@timestamp (as a
// binlog replay does) moves the server's "now" for its own statements, and so can take
// over a live lock. If this starts failing, the docs' caveat is out of date.
func TestSessionTimestampFakesNow(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, dsn, nil)); err != nil {
		t.Fatal(err)
	}
	future := fmt.Sprint(time.Now().Add(time.Hour).Unix())
	faked := mysqllock.New(openDB(t, dsn, func(c *mysql.Config) { c.Params = map[string]string{"timestamp": future} }))
	normal := mysqllock.New(openDB(t, dsn, nil))
	defer faked.Close()
	defer normal.Close()
	ln := tryAcquire(t, normal, "timestamp/live", dlock.WithTTL(time.Minute))
	lf, err := faked.TryAcquire(ctxFor(t, 10*time.Second), "timestamp/live", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("a session whose @@timestamp is an hour ahead did not take over a lock with a minute left (%v): "+
			"the caveat in docs/backends/mysql.md no longer holds", err)
	}
	release(t, lf)
	if err := ln.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the lease taken over: want ErrNotHeld, got %v", err)
	}
}

// Acquire, Release and Refresh are one statement (one round trip) each: the server
// counts one execution per call and no other command.
func TestOneStatementPerCall(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	db := openDB(t, dsn, nil)
	db.SetMaxOpenConns(1) // one connection, whose statements are prepared once
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), db); err != nil {
		t.Fatal(err)
	}
	l := mysqllock.New(db)
	defer l.Close()
	cycle := func() { locktest.RefreshCycle(t, l, "roundtrips") }
	cycle() // prepares the statements on the connection
	status := func() map[string]int64 {
		conn, err := db.Conn(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rows, err := conn.QueryContext(ctxFor(t, 10*time.Second), "SHOW SESSION STATUS WHERE Variable_name IN ('Com_stmt_execute', 'Com_stmt_prepare', 'Questions')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]int64{}
		for rows.Next() {
			var k string
			var v int64
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			m[k] = v
		}
		return m
	}
	const n = 10
	before := status()
	for range n {
		cycle()
	}
	after := status()
	exec := after["Com_stmt_execute"] - before["Com_stmt_execute"]
	prep := after["Com_stmt_prepare"] - before["Com_stmt_prepare"]
	questions := after["Questions"] - before["Questions"] - 1 // the second SHOW STATUS
	if exec != 3*n || prep != 0 || questions != 3*n {
		t.Errorf("%d acquire+refresh+release cycles: %d executions, %d prepares, %d statements; want %d, 0, %d",
			n, exec, prep, questions, 3*n, 3*n)
	}
}

// GetLockName keeps plain short keys readable, hashes the rest, stays within 64
// characters of a literal-safe alphabet, and maps different keys to different names.
func TestGetLockName(t *testing.T) {
	keys := conformance.ValidKeys()
	for _, k := range conformance.ValidKeys() {
		keys = append(keys, strings.ToUpper(k), k+" ", k+"\x00", strings.Repeat(k, 3))
	}
	keys = append(keys, "abc", "ABC", "Abc", "ß", "ss", "e", "é", strings.Repeat("a", 58), strings.Repeat("a", 59))
	seen := map[string]string{}
	for _, k := range keys {
		if dlock.ValidateKey(k) != nil {
			continue
		}
		n := mysqllock.GetLockName(k)
		if len(n) > 64 {
			t.Errorf("GetLockName(%q) = %q: %d characters, over 64", k, n, len(n))
		}
		if strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_./:#") != "" {
			t.Errorf("GetLockName(%q) = %q: characters outside [a-z0-9-_./:#]", k, n)
		}
		if other, dup := seen[n]; dup && other != k {
			t.Errorf("GetLockName(%q) = GetLockName(%q) = %q", k, other, n)
		}
		seen[n] = k
	}
	for k, want := range map[string]string{"jobs/nightly": "dlock:jobs/nightly", strings.Repeat("a", 58): "dlock:" + strings.Repeat("a", 58)} {
		if got := mysqllock.GetLockName(k); got != want {
			t.Errorf("GetLockName(%q) = %q, want %q", k, got, want)
		}
	}
	if got := mysqllock.GetLockName("Jobs"); !strings.HasPrefix(got, "dlock#") || len(got) != 64 {
		t.Errorf(`GetLockName("Jobs") = %q, want "dlock#" and 58 hex digits`, got)
	}
}

// newDatabaseURL makes a fresh database on the shared server and returns its driver
// configuration and the part of a URL after "scheme://": user[:password]@host/db.
func newDatabaseURL(t *testing.T) (*mysql.Config, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(servertest.NewDatabase(t, servertest.MySQL(t)))
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Host: cfg.Addr, Path: "/" + cfg.DBName, User: url.User(cfg.User)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	}
	return cfg, strings.TrimPrefix(u.String(), "//")
}

// Both schemes open a working Locker (the table is created), and reject what they do
// not understand.
func TestOpen(t *testing.T) {
	cfg, base := newDatabaseURL(t)
	for _, u := range []string{"mysql://" + base, "mysql://" + base + "?table=my%20locks", "mysql+getlock://" + base + "?wait_timeout=5&check_interval=250ms"} {
		l, err := dlock.Open(ctxFor(t, 30*time.Second), u)
		if err != nil {
			t.Fatalf("Open(%q): %v", u, err)
		}
		ls := tryAcquire(t, l, "open/key")
		release(t, ls)
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	db := openDB(t, cfg.FormatDSN(), nil)
	var n int
	if err := db.QueryRowContext(ctxFor(t, 10*time.Second), "SELECT COUNT(*) FROM `my locks` WHERE lock_key = 'open/key'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the table named by ?table= has %d rows for the key (%v), want 1", n, err)
	}
	for _, u := range []string{
		"mysql://" + base + "?tabel=x",
		"mysql+getlock://" + base + "?table=x",
		"mysql+getlock://" + base + "?wait_timeout=0",
		"mysql+getlock://" + base + "?check_interval=soon",
		"mysql://" + cfg.Addr,
		"mysql:///db",
		"mysql://" + cfg.User + "@" + cfg.Addr + "," + cfg.Addr + "/" + cfg.DBName, // one host only (FuzzParseURL)
	} {
		if l, err := dlock.Open(ctxFor(t, 30*time.Second), u); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", u, err)
			if l != nil {
				l.Close()
			}
		}
	}
}

// TestLongTableNameRefused: a table name with no room for its companions' suffixes
// ("_holders", "_elections", "_queue": MySQL names have at most 64 characters) is
// ErrInvalidURL at every Open, and nothing is created. (It used to pass the check,
// create the lock table and fail on the holders table; the second Open then found
// the lock table and succeeded, and semaphores and elections failed at use.) The
// longest name that fits works with every companion.
func TestLongTableNameRefused(t *testing.T) {
	cfg, base := newDatabaseURL(t)
	db := openDB(t, cfg.FormatDSN(), nil)
	tables := func() int {
		var n int
		if err := db.QueryRowContext(ctxFor(t, 10*time.Second),
			"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	long := "mysql://" + base + "?table=" + strings.Repeat("t", mysqllock.MaxTableLen+1)
	for i := range 2 {
		l, err := dlock.Open(ctxFor(t, 30*time.Second), long)
		if !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open #%d of a %d-character table: %v, want ErrInvalidURL", i+1, mysqllock.MaxTableLen+1, err)
		}
		if l != nil {
			l.Close()
		}
	}
	if n := tables(); n != 0 {
		t.Errorf("the refused Opens left %d tables", n)
	}
	l, err := dlock.Open(ctxFor(t, 30*time.Second), "mysql://"+base+"?fifo=true&table="+strings.Repeat("t", mysqllock.MaxTableLen))
	if err != nil {
		t.Fatalf("Open of a %d-character table: %v", mysqllock.MaxTableLen, err)
	}
	defer l.Close()
	ctx := ctxFor(t, 30*time.Second)
	sem, err := dlock.NewSemaphore(l, "long/sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("semaphore on the longest table: %v", err)
	}
	release(t, ls)
	e, err := dlock.NewElection(l, "long/election")
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.TryCampaign(ctx, "v")
	if err != nil {
		t.Fatalf("election on the longest table: %v", err)
	}
	release(t, term)
	if n := tables(); n != 5 {
		t.Errorf("%d tables, want the lock table and its 4 companions (holders, elections, queue, owners)", n)
	}
}

// Keys are bytes: quotes, backslashes, LIKE wildcards and case are plain data in the
// table, each a row of its own.
func TestKeysArePlainData(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	db := openDB(t, dsn, nil)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), db); err != nil {
		t.Fatal(err)
	}
	l := mysqllock.New(db)
	defer l.Close()
	keys := []string{"'", `\`, `\'`, "%", "_", "a%", "A%", "a_", "é", "e\u0301", "a ", "a"}
	for _, k := range keys {
		release(t, tryAcquire(t, l, k))
	}
	rows, err := db.QueryContext(ctxFor(t, 10*time.Second), "SELECT lock_key FROM dlock_locks")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var k []byte
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		got[string(k)] = true
	}
	for _, k := range keys {
		if !got[k] {
			t.Errorf("no row for key %q; rows: %v", k, got)
		}
	}
	if len(got) != len(keys) {
		t.Errorf("%d rows for %d keys: %v", len(got), len(keys), got)
	}
}

// An acquire whose network stalls returns when its ctx ends, without waiting for its
// clean-up; the lock its statement may still take on the server when the stalled
// bytes arrive belongs to nobody and ends at its TTL.
func TestInterruptedAcquire(t *testing.T) {
	m := servertest.MySQL(t)
	dsn := servertest.NewDatabase(t, m)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, dsn, nil)); err != nil {
		t.Fatal(err)
	}
	p := servertest.Proxy(t, m.Addr())
	stalled := mysqllock.New(openDB(t, dsn, func(c *mysql.Config) { c.Addr = p.Addr() }))
	other := mysqllock.New(openDB(t, dsn, nil))
	defer other.Close()
	const key = "interrupted"
	release(t, tryAcquire(t, stalled, key)) // a connection with prepared statements

	p.Stall()
	const ttl, wait = time.Second, 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t0 := time.Now()
	_, err := stalled.TryAcquire(ctx, key, dlock.WithTTL(ttl))
	took := time.Since(t0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire on a stalled network: want context.DeadlineExceeded, got %v", err)
	}
	if took > wait+500*time.Millisecond {
		t.Errorf("TryAcquire returned %v after its %v ctx", took, wait)
	}
	restored := time.Now()
	p.Restore()
	ls, err := other.Acquire(ctxFor(t, 10*time.Second), key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("the interrupted acquire's lock was not free 10s later: %v", err)
	}
	if free := time.Since(restored); free > ttl+500*time.Millisecond {
		t.Errorf("the interrupted acquire's lock was free only %v after the network came back (ttl %v)", free, ttl)
	}
	release(t, ls)
	if err := stalled.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// WithMigrate creates the table (any name, quoted) on first use; Migrate is
// idempotent.
func TestWithMigrate(t *testing.T) {
	db := openDB(t, servertest.MySQLDSN(t), nil)
	const table = "odd `name`"
	l := mysqllock.New(db, mysqllock.WithTable(table), mysqllock.WithMigrate())
	defer l.Close()
	release(t, tryAcquire(t, l, "migrated"))
	for range 2 {
		if err := mysqllock.Migrate(ctxFor(t, 10*time.Second), db, mysqllock.WithTable(table)); err != nil {
			t.Fatalf("Migrate on an existing table: %v", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctxFor(t, 10*time.Second), "SELECT COUNT(*) FROM `odd ``name```").Scan(&n); err != nil || n != 1 {
		t.Errorf("rows in %q: %d (%v), want 1", table, n, err)
	}
	bare := mysqllock.New(db, mysqllock.WithTable("never_created"))
	defer bare.Close()
	if _, err := bare.TryAcquire(ctxFor(t, 10*time.Second), "k"); err == nil {
		t.Error("TryAcquire without the table and without WithMigrate: want an error")
	}
}

// TestGetLockCloseEndsWaits: Acquire waits in GET_LOCK on the server (the suite's
// FIFO property checks the order); closing the Locker drops the waiting connection,
// ends the Acquire with ErrClosed and the wait on the server.
func TestGetLockCloseEndsWaits(t *testing.T) {
	h := newGetLockHarness(t)
	const key = "close-ends-waits"
	waitFor := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for h.Waiting(t, key) != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters in GET_LOCK on the server after 20s, want %d", h.Waiting(t, key), n)
			}
			time.Sleep(5 * time.Millisecond) // polls the server's state; there is no event for it
		}
	}
	ls := tryAcquire(t, h.NewLocker(t), key)
	defer release(t, ls)
	w := h.NewLocker(t)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Acquire(ctxFor(t, 60*time.Second), key)
		errc <- err
	}()
	waitFor(1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a wait ended by Close: %v, want ErrClosed", err)
	}
	waitFor(0)
}

// TestGetLockMaxConns: a GET_LOCK Locker keeps at most max_conns connections (one per
// held or waiting lease); one more acquire fails at once with ErrUnavailable naming
// the limit instead of taking another connection, and a release frees a slot.
func TestGetLockMaxConns(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	l := mysqllock.NewGetLock(openDB(t, dsn, nil), mysqllock.WithMaxConns(2))
	defer l.Close()
	a := tryAcquire(t, l, "max-conns-a")
	b := tryAcquire(t, l, "max-conns-b")
	_, err := l.TryAcquire(ctxFor(t, 10*time.Second), "max-conns-c")
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "max_conns") {
		t.Fatalf("a third lease on a Locker with max_conns=2: %v, want ErrUnavailable naming max_conns", err)
	}
	_, err = l.Acquire(ctxFor(t, 10*time.Second), "max-conns-a")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("a waiting Acquire beyond max_conns: %v, want ErrUnavailable", err)
	}
	release(t, a)
	c := tryAcquire(t, l, "max-conns-c")
	release(t, b)
	release(t, c)
	if _, err := dlock.Open(ctxFor(t, 10*time.Second), "mysql+getlock://u@127.0.0.1:1/db?max_conns=0"); !errors.Is(err, dlock.ErrInvalidURL) {
		t.Errorf("max_conns=0: %v, want ErrInvalidURL", err)
	}
}

// TestGetLockCancelledWaitEndsSession: an Acquire whose context ends while it waits
// in GET_LOCK returns only once the server has ended the waiting session (KILL from
// another connection, then its end seen in the process list), so that the server
// cannot grant the abandoned wait the lock (the strict part of the suite's
// Cancellation property). It logs what the clean-up costs: the time from the cancel
// to Acquire's return.
func TestGetLockCancelledWaitEndsSession(t *testing.T) {
	h := newGetLockHarness(t)
	holder, waiter := h.NewLocker(t), h.NewLocker(t)
	var took []time.Duration
	for i := range 20 {
		key := fmt.Sprintf("cancelled-wait-%d", i)
		ls := tryAcquire(t, holder, key)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(ctx, key)
			errc <- err
		}()
		for deadline := time.Now().Add(20 * time.Second); h.Waiting(t, key) != 1; {
			if time.Now().After(deadline) {
				t.Fatalf("no waiter in GET_LOCK on the server after 20s")
			}
			time.Sleep(time.Millisecond) // polls the server's state; there is no event for it
		}
		t0 := time.Now()
		cancel()
		err := <-errc
		took = append(took, time.Since(t0))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled wait: %v, want context.Canceled", err)
		}
		if n := h.Waiting(t, key); n != 0 {
			t.Errorf("trial %d: %d sessions still wait in GET_LOCK after the cancelled Acquire returned", i, n)
		}
		release(t, ls)
		wantFree(t, h.NewLocker(t), key)
	}
	lat := measure.Summarize(took)
	t.Logf("from cancel to return (KILL and the session's end): p50 %v, max %v over %d trials", lat.P50, lat.Max, lat.N)
}

// wantFree checks that l can take key at once, and gives it back.
func wantFree(t testing.TB, l dlock.Locker, key string) {
	t.Helper()
	release(t, tryAcquire(t, l, key))
}

// TestOpenCreatesQueueTable: a fifo=true URL on a database whose lock table exists
// without its queue table (made for the default mode) creates the queue table, so
// the fair mode works at once instead of failing every Acquire on a missing table.
func TestOpenCreatesQueueTable(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	admin := openDB(t, dsn, nil)
	ctx := ctxFor(t, 30*time.Second)
	if err := mysqllock.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	l := servertest.Open(t, dsnURL(dsn, mysqllock.Scheme, "fifo=true"))
	release(t, tryAcquire(t, l, "queue-table"))
	if n := queued(t, admin, "queue-table"); n != 0 {
		t.Errorf("%d waiters queued after an uncontended grant, want 0", n)
	}
}

// TestTLSAndPrivilegeRefusals: the lock user of TestConformanceTLS is refused
// without TLS, without a client certificate, with a wrong password, and by a client
// that does not trust the server's CA; skip-verify must be spelled out. Without
// CREATE it cannot make a missing table, and says so. No error shows the password.
func TestTLSAndPrivilegeRefusals(t *testing.T) {
	_, pki, _, base := secureMySQL(t)
	ctx := ctxFor(t, time.Minute)
	tq := pki.URLQuery()
	noCert := "tls_ca=" + url.QueryEscape(pki.CAFile) + "&tls_server_name=localhost"
	cert := "tls_cert=" + url.QueryEscape(pki.ClientCert) + "&tls_key=" + url.QueryEscape(pki.ClientKey)
	for _, c := range []struct{ name, url, want string }{
		{"plain text", "mysql://" + base, "Access denied"},
		{"no client certificate", "mysql://" + base + "?" + noCert, "Access denied"},
		{"system roots", "mysql://" + base + "?" + cert, "certificate signed by unknown authority"},
		{"wrong password", "mysql://" + strings.Replace(base, secretPassword, "WRONG-"+secretPassword, 1) + "?" + tq, "Access denied"},
		{"table missing, no CREATE", "mysql://" + base + "?table=other&" + tq, "CREATE command denied"},
		{"GET_LOCK in plain text", "mysql+getlock://" + base, "Access denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := dlock.Open(ctx, c.url)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("want a refusal saying %q, got %v", c.want, err)
			}
			if strings.Contains(err.Error(), secretPassword) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	// Verification off, spelled out.
	l, err := dlock.Open(ctx, "mysql://"+base+"?tls=skip-verify&"+cert)
	if err != nil {
		t.Fatalf("tls=skip-verify: %v", err)
	}
	release(t, tryAcquire(t, l, "skip-verify"))
	l.Close()
	for _, q := range []string{"tls=skip-verify&" + tq, "tls=false&" + cert, "tls=maybe", "tls_cert=" + url.QueryEscape(pki.ClientCert)} {
		if _, err := dlock.Open(ctx, "mysql://"+base+"?"+q); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("?%s: want ErrInvalidURL, got %v", q, err)
		}
	}
}

// TestInspect: the deployment check reads the durability of a commit, the binary
// log and the replication role (table), and wait_timeout (GET_LOCK).
func TestInspect(t *testing.T) {
	expect := func(t *testing.T, m map[string]spec.Finding, s spec.Scenario, exposed bool, setting string) {
		t.Helper()
		if f, ok := m[string(s)]; !ok || f.Exposed != exposed || !strings.Contains(f.Setting, setting) || f.Detail == "" {
			t.Errorf("%s: %+v, want exposed=%v with setting %q", s, f, exposed, setting)
		}
	}
	base := func(dsn string) string {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.User + "@" + cfg.Addr + "/" + cfg.DBName
	}
	t.Run("test server", func(t *testing.T) {
		b := base(servertest.MySQLDSN(t)) // --skip-log-bin, innodb_flush_log_at_trx_commit=2
		m := servertest.Findings(t, "mysql://"+b)
		expect(t, m, spec.ServerRestart, true, "innodb_flush_log_at_trx_commit=2")
		expect(t, m, spec.Failover, false, "log_bin=OFF read_only=OFF")
		expect(t, m, spec.ClockJump, true, "UTC_TIMESTAMP")
		expect(t, servertest.Findings(t, "mysql+getlock://"+b), spec.HolderCrash, true, "wait_timeout=28800")
		expect(t, servertest.Findings(t, "mysql+getlock://"+b+"?wait_timeout=5"), spec.HolderCrash, false, "wait_timeout=5")
	})
	t.Run("binary log", func(t *testing.T) {
		srv := servertest.NewMySQL(t, servers.MySQLOptions{Args: []string{"--log-bin", "--innodb-flush-log-at-trx-commit=1"}})
		b := base(servertest.NewDatabase(t, srv))
		m := servertest.Findings(t, "mysql://"+b)
		expect(t, m, spec.ServerRestart, false, "innodb_flush_log_at_trx_commit=1")
		expect(t, m, spec.Failover, true, "log_bin=ON")
		expect(t, servertest.Findings(t, "mysql+getlock://"+b), spec.Failover, true, "log_bin=ON")
	})
	t.Run("lock user", func(t *testing.T) {
		_, pki, _, b := secureMySQL(t)
		expect(t, servertest.Findings(t, "mysql://"+b+"?"+pki.URLQuery()), spec.Failover, false, "replica status unreadable")
	})
}

// TestMixedModesExclude: clients of the fair mode and of the default mode on one key
// exclude each other (both insert the same holders row; the fair mode adds its
// queue): goroutines of each kind take the lock in turn, and none ever finds another
// inside.
func TestMixedModesExclude(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, dsn, nil), mysqllock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	plain, fair := mysqllock.New(openDB(t, dsn, nil)), mysqllock.New(openDB(t, dsn, nil), mysqllock.WithFIFO(true))
	defer plain.Close()
	defer fair.Close()
	locktest.MutuallyExclusive(t, fmt.Sprintf("mixed/%d", time.Now().UnixNano()), plain, fair)
}

// TestGetLockReleaseHonoursCtx: Release returns by its context even while a check
// uses the lease's connection (a ping stuck on a link that does not deliver): it
// does not wait for the check to end, which takes up to a check interval. The
// lease is then as it was, and released once the link delivers again.
func TestGetLockReleaseHonoursCtx(t *testing.T) {
	const check = 5 * time.Second
	dsn := servertest.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := servertest.Proxy(t, cfg.Addr)
	l := servertest.Open(t, dsnURL(strings.Replace(dsn, cfg.Addr, px.Addr(), 1), "mysql+getlock", "check_interval="+check.String()))
	locktest.ReleaseHonoursCtx(t, tryAcquire(t, l, "release-ctx/getlock"), px, check)
}

// TestGetLockSlowAnswerIsNotALoss: a check whose ping is answered late (a link, or a
// machine, slower than the check interval) does not end the lease while the server
// keeps the session: the answer is awaited up to dldriver.SessionAnswerWait, well before wait_timeout
// could free the lock. The link holds a check's ping for five intervals; the lease
// is still held afterwards and releases normally. (Waiting one interval, as the
// checks once did, lost it.)
func TestGetLockSlowAnswerIsNotALoss(t *testing.T) {
	const check = 100 * time.Millisecond
	dsn := servertest.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := servertest.Proxy(t, cfg.Addr)
	l := servertest.Open(t, dsnURL(strings.Replace(dsn, cfg.Addr, px.Addr(), 1), "mysql+getlock", "wait_timeout=2&check_interval="+check.String()))
	locktest.SlowAnswerIsNotALoss(t, tryAcquire(t, l, "slow/getlock"), px, check)
}

// TestCloseWaitsForWaiters: a waiter whose Locker closes leaves the queue (the fair
// mode's table, GET_LOCK's wait on the server) before the client closes, and a grant
// that lands during Close is released (closetest).
func TestCloseWaitsForWaiters(t *testing.T) {
	dsn := servertest.MySQLDSN(t)
	admin := openDB(t, dsn, nil)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	urlAt := func(scheme, q string) func(addr string) string {
		return func(addr string) string { return dsnURL(strings.Replace(dsn, cfg.Addr, addr, 1), scheme, q) }
	}
	t.Run("fifo", func(t *testing.T) {
		closetest.Run(t, closetest.Target{Addr: cfg.Addr, URL: urlAt("mysql", "fifo=true"),
			Waiting: func(t testing.TB, key string) int { return queued(t, admin, key) }})
	})
	t.Run("getlock", func(t *testing.T) {
		closetest.Run(t, closetest.Target{Addr: cfg.Addr, URL: urlAt("mysql+getlock", ""),
			Waiting: func(t testing.TB, key string) int { return inGetLock(t, admin, key) }})
	})
}
