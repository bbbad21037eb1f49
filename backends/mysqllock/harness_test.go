package mysqllock_test

import (
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) {
	conformance.ChildMain()
	// The driver logs broken connections; the tests break them on purpose.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	os.Exit(servertest.Finish(code))
}

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// openDB opens a pool for dsn, closed when t ends, with its configuration changed
// by edit (nil: as is).
func openDB(t testing.TB, dsn string, edit func(*mysql.Config)) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

// tableHarness gives the suite unique-index clients, each with its own pool, on one
// fresh database.
type tableHarness struct {
	dsn   string
	admin *sql.DB
	fifo  bool   // the fair mode (WithFIFO)
	url   string // when set, NewLocker opens it
	name  string
}

func newTableHarness(t *testing.T, fifo bool) *tableHarness {
	dsn := servertest.MySQLDSN(t)
	admin := openDB(t, dsn, nil)
	if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), admin, mysqllock.WithFIFO(fifo)); err != nil {
		t.Fatal(err)
	}
	return &tableHarness{dsn: dsn, admin: admin, fifo: fifo}
}

func (h *tableHarness) NewLocker(t testing.TB) dlock.Locker {
	if h.url != "" {
		return servertest.Open(t, h.url)
	}
	return mysqllock.New(openDB(t, h.dsn, nil), mysqllock.WithFIFO(h.fifo), mysqllock.OwnDB())
}

func (h *tableHarness) Capabilities() spec.Capabilities {
	if h.url != "" {
		return conformance.MustDeclare(h.url)
	}
	return conformance.MustDeclare(dsnURL(h.dsn, mysqllock.Scheme, fifoQuery(h.fifo)))
}

func (h *tableHarness) Name() string {
	switch {
	case h.name != "":
		return h.name
	case h.fifo:
		return "mysql (fifo)"
	}
	return "mysql"
}

// fifoQuery is the URL query of the fair mode, or "".
func fifoQuery(fifo bool) string {
	if fifo {
		return "fifo=true"
	}
	return ""
}

// Waiting counts the live waiters in key's queue (the fair mode's).
func (h *tableHarness) Waiting(t testing.TB, key string) int { return queued(t, h.admin, key) }

// queued counts the waiters of key in the default table's queue whose deadline has
// not passed.
func queued(t testing.TB, db *sql.DB, key string) int {
	var n int
	err := db.QueryRowContext(ctxFor(t, 10*time.Second),
		"SELECT COUNT(*) FROM "+mysqllock.DefaultTable+mysqllock.QueueSuffix+" WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6)", key).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dsnURL turns a go-sql-driver DSN into a URL of scheme with query q (no password:
// the test servers have none).
func dsnURL(dsn, scheme, q string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	u := fmt.Sprintf("%s://%s@%s/%s", scheme, cfg.User, cfg.Addr, cfg.DBName)
	if q != "" {
		u += "?" + q
	}
	return u
}

// DeleteKey frees key's live lock behind its holder's back, as an operator should:
// the row (and so the key's token counter) stays.
func (h *tableHarness) DeleteKey(t testing.TB, key string) {
	res, err := h.admin.ExecContext(ctxFor(t, 10*time.Second),
		"UPDATE dlock_locks SET expires_at = '1000-01-01' WHERE lock_key = ? AND expires_at > UTC_TIMESTAMP(6)", key)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("DeleteKey(%q): no live lock to delete", key)
	}
}

// getLockHarness gives the suite GET_LOCK clients, each with its own pool behind its
// own TCP proxy (so that one client can vanish), with a short wait_timeout.
type getLockHarness struct {
	server *servers.MySQL
	dsn    string
	admin  *sql.DB
	// urlFor, when set, gives the URL of a client that reaches the server at addr
	// (its proxy): NewLocker opens it.
	urlFor func(addr string) string
	name   string

	proxies servertest.Links[*servers.Proxy]
}

// sessionTimeout is the wait_timeout the GET_LOCK harness sets on its connections.
const sessionTimeout = 2 * time.Second

func newGetLockHarness(t *testing.T) *getLockHarness {
	m := servertest.MySQL(t)
	return getLockHarnessOn(t, m, servertest.NewDatabase(t, m))
}

// getLockHarnessOn is newGetLockHarness on the database dsn of m.
func getLockHarnessOn(t *testing.T, m *servers.MySQL, dsn string) *getLockHarness {
	admin := openDB(t, dsn, nil)
	// Open the admin connection now, before the suite's goroutine snapshot.
	if err := admin.PingContext(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return &getLockHarness{server: m, dsn: dsn, admin: admin}
}

func (h *getLockHarness) NewLocker(t testing.TB) dlock.Locker {
	p := servertest.Proxy(t, h.server.Addr())
	var l dlock.Locker
	if h.urlFor != nil {
		l = servertest.Open(t, h.urlFor(p.Addr()))
	} else {
		db := openDB(t, h.dsn, func(c *mysql.Config) {
			c.Addr = p.Addr()
			c.Params = map[string]string{"wait_timeout": fmt.Sprint(int(sessionTimeout.Seconds()))}
		})
		l = mysqllock.NewGetLock(db, mysqllock.OwnDB())
	}
	h.proxies.Add(t, l, p)
	return l
}

func (h *getLockHarness) Capabilities() spec.Capabilities {
	if h.urlFor != nil {
		return conformance.MustDeclare(h.urlFor(h.server.Addr()))
	}
	return conformance.MustDeclare(dsnURL(h.dsn, mysqllock.GetLockScheme, fmt.Sprintf("wait_timeout=%d", sessionTimeout/time.Second)))
}

func (h *getLockHarness) Name() string {
	if h.name != "" {
		return h.name
	}
	return "mysql+getlock"
}

var _ conformance.QueueInspector = (*getLockHarness)(nil) // mysql+getlock declares FIFO

// Waiting counts the connections waiting in GET_LOCK for key's name.
func (h *getLockHarness) Waiting(t testing.TB, key string) int { return inGetLock(t, h.admin, key) }

// inGetLock counts the connections waiting in GET_LOCK for key's name.
func inGetLock(t testing.TB, admin *sql.DB, key string) int {
	var n int
	err := admin.QueryRowContext(ctxFor(t, 10*time.Second),
		"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ?",
		"%GET_LOCK('"+mysqllock.GetLockName(key)+"'%").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Vanish cuts l off the network without closing anything, as a host that died or a
// partition would: the server keeps its session (and its locks) until wait_timeout.
func (h *getLockHarness) Vanish(t testing.TB, l dlock.Locker) {
	h.proxies.Of(t, l).Blackhole()
}

// DeleteKey kills the connection that holds key's lock, from another session.
func (h *getLockHarness) DeleteKey(t testing.TB, key string) {
	killHolder(t, h.admin, key)
}

// killHolder kills the connection whose session holds key's GET_LOCK lock.
func killHolder(t testing.TB, admin *sql.DB, key string) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	var id sql.NullInt64
	if err := admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", mysqllock.GetLockName(key)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if !id.Valid {
		t.Fatalf("no session holds %q", key)
	}
	if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id.Int64)); err != nil {
		t.Fatal(err)
	}
	// KILL returns before the killed session has ended: wait, in the server, until
	// the lock is free (take it and give it back).
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 10)", mysqllock.GetLockName(key)).Scan(&got); err != nil || got.Int64 != 1 {
		t.Fatalf("waiting for the killed session to free %q: %v %v", key, got, err)
	}
	if _, err := conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", mysqllock.GetLockName(key)); err != nil {
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

func TestConformanceGetLock(t *testing.T) {
	conformance.Run(t, newGetLockHarness(t))
}

// secretPassword is the lock user's password in the TLS tests: no message may
// show it.
const secretPassword = "S3CRET-mysql-pw"

// lockGrants are the privileges a lock user needs on the table of New (created in
// advance by an administrator): docs/connecting.md lists them. GET_LOCK needs none.
const lockGrants = "SELECT, INSERT, UPDATE"

// holdersGrants is what a lock user needs on the holders table of the semaphores
// and read-write locks: their rows are deleted on release and when expired.
const holdersGrants = "SELECT, INSERT, UPDATE, DELETE"

// electionsGrants is what a lock user needs on the elections table (old terms are
// pruned: DELETE).
const electionsGrants = "SELECT, INSERT, UPDATE, DELETE"

// queueGrants is what a lock user of the fair mode (fifo=true) needs on the queue
// table: waiters insert their row, renew its deadline, and delete it (and the
// key's dead waiters' rows) when they leave.
const queueGrants = "SELECT, INSERT, UPDATE, DELETE"

// secureMySQL starts a server that offers TLS, creates a database, its lock table
// (as root), and a user "locker" (password secretPassword) that must connect over
// TLS with a client certificate the PKI's CA signed (REQUIRE X509) and holds only
// lockGrants on the lock table, holdersGrants on its holders table, electionsGrants
// on its elections table and queueGrants on its queue table (the fair mode's). It
// returns the server, the PKI, root's DSN of the database and the URL tail of the
// lock user: "locker:…@host:port/db".
func secureMySQL(t testing.TB) (*servers.MySQL, *servers.PKI, string, string) {
	pki := servertest.PKI(t)
	m := servertest.NewMySQL(t, servers.MySQLOptions{TLS: pki})
	dsn := servertest.NewDatabase(t, m)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin := openDB(t, dsn, nil)
	ctx := ctxFor(t, 30*time.Second)
	if err := mysqllock.Migrate(ctx, admin, mysqllock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE USER 'locker'@'%' IDENTIFIED BY '" + secretPassword + "' REQUIRE X509",
		"GRANT " + lockGrants + " ON `" + cfg.DBName + "`.`" + mysqllock.DefaultTable + "` TO 'locker'@'%'",
		"GRANT " + holdersGrants + " ON `" + cfg.DBName + "`.`" + mysqllock.HoldersTable(mysqllock.DefaultTable) + "` TO 'locker'@'%'",
		"GRANT " + electionsGrants + " ON `" + cfg.DBName + "`.`" + mysqllock.ElectionsTable(mysqllock.DefaultTable) + "` TO 'locker'@'%'",
		"GRANT " + queueGrants + " ON `" + cfg.DBName + "`.`" + mysqllock.DefaultTable + mysqllock.QueueSuffix + "` TO 'locker'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", strings.ReplaceAll(q, secretPassword, "…"), err)
		}
	}
	return m, pki, dsn, "locker:" + secretPassword + "@" + cfg.Addr + "/" + cfg.DBName
}

// TestConformanceTLS runs the suite on both schemes (and the table's fair mode)
// opened from URLs with a CA, a client certificate and key and a server name, as a
// user the server admits only over TLS with a client certificate, holding only the
// privileges a lock user needs (the tables created in advance by an administrator).
func TestConformanceTLS(t *testing.T) {
	m, pki, dsn, base := secureMySQL(t)
	t.Run("table", func(t *testing.T) {
		admin := openDB(t, dsn, nil)
		// Open its connection now, before the suite's goroutine snapshot.
		if err := admin.PingContext(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		conformance.Run(t, &tableHarness{dsn: dsn, admin: admin, name: "mysql (TLS, lock user)", url: "mysql://" + base + "?" + pki.URLQuery()})
	})
	t.Run("table-fifo", func(t *testing.T) {
		admin := openDB(t, dsn, nil)
		if err := admin.PingContext(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		conformance.Run(t, &tableHarness{dsn: dsn, admin: admin, name: "mysql (TLS, lock user, fifo)", url: "mysql://" + base + "?fifo=true&" + pki.URLQuery()})
	})
	t.Run("getlock", func(t *testing.T) {
		h := getLockHarnessOn(t, m, dsn)
		h.name = "mysql+getlock (TLS, lock user)"
		h.urlFor = func(addr string) string {
			return "mysql+getlock://" + strings.Replace(base, m.Addr(), addr, 1) + "?" + pki.URLQuery() +
				fmt.Sprintf("&wait_timeout=%d", sessionTimeout/time.Second)
		}
		conformance.Run(t, h)
	})
}
