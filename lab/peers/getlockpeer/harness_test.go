package getlockpeer_test

import (
	"context"
	"database/sql"
	"io"
	"log"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/getlockpeer"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) {
	conformance.ChildMain() // returns at once unless a fault scenario started this process as a holder
	// The driver logs the connections that Vanish cuts; the tests check what matters.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	servertest.Main(m)
}

// harness gives the suite clients of the shared MariaDB, each with its own pool
// through its own proxy, so that one client can vanish.
type harness struct {
	m       *servers.MySQL
	proxies servertest.Links[*servers.Proxy]
}

func newHarness(t *testing.T) *harness {
	return &harness{m: servertest.MySQL(t)}
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	p := servertest.Proxy(t, h.m.Addr())
	cfg, err := mysql.ParseDSN(h.m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = p.Addr()
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	l := ownsDB{getlockpeer.New(db), db}
	h.proxies.Add(t, l, p)
	return l
}

// ownsDB is the peer's Locker that closes its pool when it is closed, as a program
// does when it is done with it. The suite makes a pool per client: pools left open
// until the test ended kept their connections, and a property's 20 trials (the full
// campaign's) ran MariaDB out of them (Error 1040).
type ownsDB struct {
	dlock.Locker
	db *sql.DB
}

func (o ownsDB) Close() error {
	err := o.Locker.Close()
	_ = o.db.Close()
	return err
}

// Unwrap returns the peer's own Locker (dlock.Unwrapper).
func (o ownsDB) Unwrap() dlock.Locker { return o.Locker }

// Capabilities: locks last as long as their connection. Weak: a cut connection frees
// its lock at once, while its client, told nothing, goes on (DeadlockFreedom: freed
// before the holder's lease ended; DoneAndErr: Done stays open); lock names end at the first NUL (KeyIsolation: "k\x00"
// is "k") and are limited to 64 characters (InputValidation).
func (h *harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare("peer+getlock://root@" + h.m.Addr())
}

func (h *harness) Name() string { return "peer+getlock" }

var _ conformance.QueueInspector = (*harness)(nil) // peer+getlock declares FIFO

// Waiting counts the connections waiting in GET_LOCK on the server (the suite's
// keys are the only ones the package's tests wait for at that time).
func (h *harness) Waiting(t testing.TB, key string) int {
	db, err := sql.Open("mysql", h.m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close() // one per call: the suite polls, and checks for leaks afterwards
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Vanish cuts the client's connections, as a crash or a network cut does.
func (h *harness) Vanish(t testing.TB, l dlock.Locker) { h.proxies.Of(t, l).Cut() }

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}
