package pglock_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) {
	conformance.ChildMain()
	code := m.Run()
	os.Exit(servertest.Finish(code))
}

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// pool opens a pgx pool for url, closed when t ends.
func pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(ctxFor(t, 10*time.Second), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// lockURL is the URL of scheme for database db on the server at addr, as the
// superuser, with query q ("" for none).
func lockURL(scheme, addr, db, q string) string {
	u := fmt.Sprintf("%s://postgres@%s/%s", scheme, addr, db)
	if q != "" {
		u += "?" + q
	}
	return u
}

// tableHarness gives the suite lease-table clients, each opened from the URL (its
// own pool), on one fresh database.
type tableHarness struct {
	url   string
	admin *pgxpool.Pool
	fifo  bool
	name  string
}

func newTableHarness(t *testing.T, fifo bool) *tableHarness {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin, pglock.WithFIFO(fifo)); err != nil {
		t.Fatal(err)
	}
	return &tableHarness{url: lockURL(pglock.Scheme, p.Addr(), db, fifoQuery(fifo)), admin: admin, fifo: fifo}
}

// fifoQuery is the URL query of the fair mode, or "".
func fifoQuery(fifo bool) string {
	if fifo {
		return "fifo=true"
	}
	return ""
}

func (h *tableHarness) NewLocker(t testing.TB) dlock.Locker { return servertest.Open(t, h.url) }

func (h *tableHarness) Capabilities() spec.Capabilities { return conformance.MustDeclare(h.url) }

func (h *tableHarness) Name() string {
	switch {
	case h.name != "":
		return h.name
	case h.fifo:
		return "postgres (fifo)"
	}
	return "postgres"
}

// Waiting counts the live waiters in key's queue (the fair mode's).
func (h *tableHarness) Waiting(t testing.TB, key string) int { return queued(t, h.admin, key) }

// queued counts the waiters of key in the default table's queue whose deadline has
// not passed.
func queued(t testing.TB, admin *pgxpool.Pool, key string) int {
	var n int
	err := admin.QueryRow(ctxFor(t, 10*time.Second),
		"SELECT count(*) FROM "+pglock.QueueTable(pglock.DefaultTable)+" WHERE lock_key = $1 AND deadline > statement_timestamp()", []byte(key)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// DeleteKey frees key's live lock behind its holder's back, as an operator should:
// the row (and so the key's token counter) stays.
func (h *tableHarness) DeleteKey(t testing.TB, key string) { freeRow(t, h.admin, key) }

func freeRow(t testing.TB, admin *pgxpool.Pool, key string) {
	tag, err := admin.Exec(ctxFor(t, 10*time.Second),
		"UPDATE "+pglock.DefaultTable+" SET expires_at = '-infinity' WHERE lock_key = $1 AND expires_at > statement_timestamp()", []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("DeleteKey(%q): no live lock to delete", key)
	}
}

// sessionTimeout is the idle_session_timeout the advisory harness sets: how long
// the server keeps a vanished client's session.
const sessionTimeout = 2 * time.Second

// advisoryCheck is the advisory harness's check interval: a cut-off holder learns
// of its loss half of sessionTimeout before the server may free its lock
// (driver.SessionAnswerWait).
const advisoryCheck = 100 * time.Millisecond

// advisoryQuery is the advisory harness's URL query.
var advisoryQuery = fmt.Sprintf("session_timeout=%v&check_interval=%v", sessionTimeout, advisoryCheck)

// advisoryHarness gives the suite advisory clients, each with its own pool behind
// its own TCP proxy (so that one client can vanish).
type advisoryHarness struct {
	server *servers.Postgres
	db     string
	admin  *pgxpool.Pool
	// urlFor gives the URL of a client that reaches the server at addr (its proxy).
	urlFor func(addr string) string
	name   string

	proxies servertest.Links[*servers.Proxy]
}

func newAdvisoryHarness(t *testing.T) *advisoryHarness {
	p := servertest.Postgres(t)
	return advisoryHarnessOn(t, p, servertest.PostgresDatabase(t, p))
}

func advisoryHarnessOn(t *testing.T, p *servers.Postgres, db string) *advisoryHarness {
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin); err != nil {
		t.Fatal(err)
	}
	return &advisoryHarness{server: p, db: db, admin: admin,
		urlFor: func(addr string) string { return lockURL(pglock.AdvisoryScheme, addr, db, advisoryQuery) }}
}

func (h *advisoryHarness) NewLocker(t testing.TB) dlock.Locker {
	p := servertest.Proxy(t, h.server.Addr())
	l := servertest.Open(t, h.urlFor(p.Addr()))
	h.proxies.Add(t, l, p)
	return l
}

func (h *advisoryHarness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare(h.urlFor(h.server.Addr()))
}

func (h *advisoryHarness) Name() string {
	if h.name != "" {
		return h.name
	}
	return "postgres+advisory"
}

var _ conformance.QueueInspector = (*advisoryHarness)(nil) // postgres+advisory declares FIFO

// Waiting counts the sessions waiting for key's advisory lock.
func (h *advisoryHarness) Waiting(t testing.TB, key string) int {
	return advisoryWaiters(t, h.admin, key)
}

// lockIDOf returns key's advisory lock id from the registry.
func lockIDOf(t testing.TB, admin *pgxpool.Pool, name string) int64 {
	var id int64
	err := admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT id FROM "+pglock.DefaultRegistry+" WHERE lock_key = $1", []byte(name)).Scan(&id)
	if err != nil {
		t.Fatalf("the registry's id of %q: %v", name, err)
	}
	return id
}

// lockRows is the pg_locks condition of an advisory lock id ($1): a bigint key is
// classid (high half), objid (low half) and objsubid 1.
const lockRows = `locktype = 'advisory' AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295`

// advisoryWaiters counts the sessions waiting for name's advisory lock.
func advisoryWaiters(t testing.TB, admin *pgxpool.Pool, name string) int {
	var n int
	var reg bool
	if err := admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) > 0 FROM "+pglock.DefaultRegistry+" WHERE lock_key = $1", []byte(name)).Scan(&reg); err != nil {
		t.Fatal(err)
	}
	if !reg {
		return 0
	}
	err := admin.QueryRow(ctxFor(t, 10*time.Second), "SELECT count(*) FROM pg_locks WHERE NOT granted AND "+lockRows, lockIDOf(t, admin, name)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Vanish cuts l off the network without closing anything, as a host that died or a
// partition would: the server keeps its session (and its locks) until
// idle_session_timeout.
func (h *advisoryHarness) Vanish(t testing.TB, l dlock.Locker) {
	h.proxies.Of(t, l).Blackhole()
}

// DeleteKey ends the session that holds key's lock (pg_terminate_backend).
func (h *advisoryHarness) DeleteKey(t testing.TB, key string) { terminateHolder(t, h.admin, key) }

// terminateHolder ends the session holding name's advisory lock and returns once
// the lock is free.
func terminateHolder(t testing.TB, admin *pgxpool.Pool, name string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	id := lockIDOf(t, admin, name)
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE granted AND "+lockRows, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no session holds %q", name)
	}
	// pg_terminate_backend returns before the session has ended: wait, in the
	// server, until the lock is free (take it and give it back).
	conn, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET lock_timeout = '10s'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET lock_timeout") //nolint:errcheck
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", id); err != nil {
		t.Fatalf("waiting for the terminated session to free %q: %v", name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", id); err != nil {
		t.Fatal(err)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newTableHarness(t, false))
}

// TestConformanceFIFO runs the suite on the table's fair mode (WithFIFO).
func TestConformanceFIFO(t *testing.T) {
	conformance.Run(t, newTableHarness(t, true))
}

func TestConformanceAdvisory(t *testing.T) {
	conformance.Run(t, newAdvisoryHarness(t))
}
