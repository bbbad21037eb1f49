package pglock_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// secretPassword is the lock user's password in these tests: no message may show it.
const secretPassword = "S3CRET-pg-pw"

// lockUserGrants are the privileges a lock user needs on tables an administrator
// created (pglock.Migrate), with the default names: docs/connecting.md lists them.
var lockUserGrants = []string{
	`GRANT SELECT, INSERT, UPDATE ON dlock_locks TO locker`,
	`GRANT SELECT, INSERT, UPDATE, DELETE ON dlock_locks_holders, dlock_locks_elections, dlock_locks_queue TO locker`,
	`GRANT USAGE ON SEQUENCE dlock_locks_queue_seq_seq TO locker`,
	`GRANT SELECT, INSERT, UPDATE ON dlock_locks_owners TO locker`,
	`GRANT SELECT, INSERT ON dlock_advisory_keys TO locker`,
}

// secureServer starts a server that offers TLS and admits the user "locker"
// (password secretPassword) only over TLS with a client certificate the PKI's CA
// signed, and a database whose tables root created, on which locker holds only
// lockUserGrants. It returns the server, the PKI, the database and the URL tail of
// the lock user: "locker:…@localhost:port/db".
func secureServer(t *testing.T) (*servers.Postgres, *servers.PKI, string, string) {
	pki := servertest.PKI(t)
	p := servertest.NewPostgres(t, servers.PostgresOptions{TLS: pki, HBA: []string{
		"hostnossl all locker all reject",
		"hostssl all locker all scram-sha-256 clientcert=verify-ca",
	}})
	db := servertest.PostgresDatabase(t, p)
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), pool(t, p.URL(db)), pglock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{"CREATE ROLE locker LOGIN PASSWORD '" + secretPassword + "'"}, lockUserGrants...)
	if err := p.Exec(ctxFor(t, 30*time.Second), db, stmts...); err != nil {
		t.Fatal(strings.ReplaceAll(err.Error(), secretPassword, "…"))
	}
	t.Cleanup(func() {
		_ = p.Exec(ctxFor(t, 10*time.Second), "", "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)", "DROP ROLE IF EXISTS locker")
	})
	_, port, _ := strings.Cut(p.Addr(), ":")
	return p, pki, db, "locker:" + secretPassword + "@localhost:" + port + "/" + db
}

// TestConformanceTLS runs the suite on both modes (and the table's fair mode) opened
// from URLs with a CA, a client certificate and key and a server name, as a user
// the server admits only over TLS with a client certificate, holding only the
// privileges a lock user needs on tables an administrator created.
func TestConformanceTLS(t *testing.T) {
	p, pki, db, base := secureServer(t)
	admin := pool(t, p.URL(db))
	t.Run("table", func(t *testing.T) {
		conformance.Run(t, &tableHarness{url: "postgres://" + base + "?" + pki.URLQuery(), admin: admin, name: "postgres (TLS, lock user)"})
	})
	t.Run("table-fifo", func(t *testing.T) {
		conformance.Run(t, &tableHarness{url: "postgres://" + base + "?fifo=true&sslmode=verify-full&" + pki.URLQuery(), admin: admin, fifo: true,
			name: "postgres (TLS, lock user, fifo)"})
	})
	t.Run("advisory", func(t *testing.T) {
		h := advisoryHarnessOn(t, p, db)
		h.name = "postgres+advisory (TLS, lock user)"
		h.urlFor = func(addr string) string {
			_, port, _ := strings.Cut(addr, ":")
			return "postgres+advisory://" + strings.Replace(base, "localhost:"+strings.Split(p.Addr(), ":")[1], "localhost:"+port, 1) +
				"?" + advisoryQuery + "&" + pki.URLQuery()
		}
		conformance.Run(t, h)
	})
}

// Each missing requirement is refused — plain text, no client certificate, the
// system's roots, another server name, a wrong password — with an error that shows
// no password; sslmode=verify-ca (the chain, not the name) and sslmode=require (no
// verification) work when spelled out.
func TestTLSAndPrivilegeRefusals(t *testing.T) {
	_, pki, _, base := secureServer(t)
	q, _ := url.ParseQuery(pki.URLQuery())
	ca, cert, key := q.Get("tls_ca"), q.Get("tls_cert"), q.Get("tls_key")
	withClient := "&tls_cert=" + url.QueryEscape(cert) + "&tls_key=" + url.QueryEscape(key)
	refused := map[string]string{
		"plain text":            "postgres://" + base + "?sslmode=disable",
		"no client certificate": "postgres://" + base + "?tls_ca=" + url.QueryEscape(ca) + "&tls_server_name=localhost",
		"the system's roots":    "postgres://" + base + "?sslmode=verify-full" + withClient,
		"another server name":   "postgres://" + base + "?tls_ca=" + url.QueryEscape(ca) + "&tls_server_name=db.example" + withClient,
		"a wrong password":      "postgres://" + strings.Replace(base, secretPassword, "wrong-"+secretPassword, 1) + "?" + pki.URLQuery(),
	}
	for what, u := range refused {
		l, err := dlock.Open(ctxFor(t, 30*time.Second), u)
		if err == nil {
			l.Close()
			t.Errorf("%s: opened", what)
			continue
		}
		if strings.Contains(err.Error(), secretPassword) {
			t.Errorf("%s: the error shows the password: %v", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	for what, u := range map[string]string{
		"sslmode=verify-ca": "postgres://" + base + "?sslmode=verify-ca&tls_ca=" + url.QueryEscape(ca) + withClient,
		"sslmode=require":   "postgres://" + base + "?sslmode=require" + withClient,
	} {
		l := servertest.Open(t, u)
		ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), "tls/"+what)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		release(t, ls)
	}
	// Without the tables and without CREATE, the opener says what it was denied.
	_, err := dlock.Open(ctxFor(t, 30*time.Second), "postgres://"+base+"?table=missing&"+pki.URLQuery())
	if err == nil || !strings.Contains(err.Error(), "permission denied") || strings.Contains(err.Error(), secretPassword) {
		t.Errorf("a missing table without CREATE: want a permission error, got %v", err)
	}
}

// TestDiscardEndsTheSession: a connection dropped with a transaction open (an
// acquire cut off by its ctx between its statements) ends its session at once, also
// over TLS after a write that timed out — what an ending ctx does to a request being
// sent. crypto/tls refuses every write after one timed out, so pgx's own close could
// not send Terminate, and its background drain kept the session, and the
// transaction's locks, for 15 seconds: a read-write lock stayed full after its
// holder released (RWCancellation in CI, 2026-12-06).
func TestDiscardEndsTheSession(t *testing.T) {
	p, pki, db, base := secureServer(t)
	cfg, err := pgxpool.ParseConfig("postgres://" + base + "?sslmode=require")
	if err != nil {
		t.Fatal(strings.ReplaceAll(err.Error(), secretPassword, "…"))
	}
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = pki.ClientTLS(), nil
	cfg.ConnConfig.TLSConfig.ServerName = "localhost"
	ctx := ctxFor(t, 30*time.Second)
	locker, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	conn, err := locker.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "SELECT pg_advisory_xact_lock(7)"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Release()
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The write of ROLLBACK times out, as it does when ctx ends while it is sent.
	if err := conn.Conn().PgConn().Conn().SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err == nil {
		t.Fatal("ROLLBACK was sent past its write deadline")
	}
	pglock.Discard(conn)
	// The server ends a session whose client is gone when it reads from it, and its
	// transaction's lock with it: wait in the server for the lock. pgx's background
	// close held it for 15 s; the bound only has to tell the two apart.
	admin, err := pool(t, p.URL(db)).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Release()
	if _, err := admin.Exec(ctx, "SET lock_timeout = '5s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(7)"); err != nil {
		t.Fatalf("the dropped connection's transaction still held its lock 5s later: %v", err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_unlock(7)"); err != nil {
		t.Fatal(err)
	}
}
