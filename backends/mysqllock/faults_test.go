package mysqllock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// faultHarness runs the fault scenarios on a private server that it may crash and
// restart: holders in child processes (by URL), a server restart, a partitioned
// holder. getLock picks NewGetLock over New.
type faultHarness struct {
	server  *servers.MySQL
	dsn     string
	getLock bool
	fifo    bool // the table's fair mode
}

// faultCheck is the GET_LOCK check interval in the fault scenarios: a cut-off holder
// learns of its loss within half the sessions' wait_timeout (sessionTimeout), after
// which the server frees its lock. (A restart it learns of
// as the server's process ends, whatever the interval: "getlock-defaults" shows it
// with the default 1s.)
const faultCheck = 100 * time.Millisecond

func newFaultHarness(t *testing.T, getLock bool) *faultHarness {
	return newFaultHarnessFIFO(t, getLock, false)
}

func newFaultHarnessFIFO(t *testing.T, getLock, fifo bool) *faultHarness {
	m := servertest.NewMySQL(t, servers.MySQLOptions{})
	h := &faultHarness{server: m, dsn: servertest.NewDatabase(t, m), getLock: getLock, fifo: fifo}
	if !getLock {
		if err := mysqllock.Migrate(ctxFor(t, 30*time.Second), openDB(t, h.dsn, nil), mysqllock.WithFIFO(fifo)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func (h *faultHarness) locker(t testing.TB, addr string) dlock.Locker {
	db := openDB(t, h.dsn, func(c *mysql.Config) {
		c.Addr = addr
		if h.getLock {
			c.Params = map[string]string{"wait_timeout": fmt.Sprint(int(sessionTimeout.Seconds()))}
		}
	})
	if h.getLock {
		return mysqllock.NewGetLock(db, mysqllock.WithCheckInterval(faultCheck))
	}
	return mysqllock.New(db, mysqllock.WithFIFO(h.fifo))
}

func (h *faultHarness) NewLocker(t testing.TB) dlock.Locker { return h.locker(t, h.server.Addr()) }

func (h *faultHarness) Capabilities() spec.Capabilities { return conformance.MustDeclare(h.url()) }

func (h *faultHarness) Name() string {
	if h.getLock {
		return "mysql+getlock"
	}
	if h.fifo {
		return "mysql (fifo)"
	}
	return "mysql"
}

// URL is how a child process opens the same backend.
func (h *faultHarness) URL(t testing.TB) string { return h.url() }

func (h *faultHarness) url() string {
	if h.getLock {
		return dsnURL(h.dsn, mysqllock.GetLockScheme, fmt.Sprintf("wait_timeout=%d&check_interval=%v", int(sessionTimeout.Seconds()), faultCheck))
	}
	return dsnURL(h.dsn, mysqllock.Scheme, fifoQuery(h.fifo))
}

// Waiting counts the live waiters in key's queue (the fair mode's).
func (h *faultHarness) Waiting(t testing.TB, key string) int {
	if h.getLock {
		return inGetLock(t, openDB(t, h.dsn, nil), key)
	}
	return queued(t, openDB(t, h.dsn, nil), key)
}

// RestartServers crashes the server (SIGKILL) and starts it again on its data.
func (h *faultHarness) RestartServers(t testing.TB) {
	servertest.CrashAndRestart(t, h.server)
}

func (h *faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p := servertest.Proxy(t, h.server.Addr())
	return h.locker(t, p.Addr()), p
}

// guardedFaults runs HolderPauseFenced with every fencing guard as the resource
// too, on servers of their own (fencetest.Guards): a cell per guard.
type guardedFaults struct{ *faultHarness }

func (guardedFaults) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

// TestFaults runs the suite's fault scenarios: a holder process killed or paused, the
// server crashed and restarted while a lock is held, a holder cut off the network;
// the table's paused holder is refused by every fencing guard too.
func TestFaults(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		t.Parallel() // private servers: the two wait out their TTLs side by side
		conformance.RunFaults(t, guardedFaults{newFaultHarness(t, false)})
	})
	t.Run("table-fifo", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFaultHarnessFIFO(t, false, true))
	})
	t.Run("getlock", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFaultHarness(t, true))
	})
	t.Run("getlock-defaults", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, getLockDefaults{newFaultHarness(t, true)})
	})
}

// getLockDefaults opens mysql+getlock Lockers by a URL with no parameters — the
// server's own wait_timeout (8 hours) and the default check interval (1s) — for what
// depends on them: a restart, a cut-off and a hung holder.
type getLockDefaults struct{ h *faultHarness }

func (g getLockDefaults) url(addr string) string {
	cfg, err := mysql.ParseDSN(g.h.dsn)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s://%s@%s/%s", mysqllock.GetLockScheme, cfg.User, addr, cfg.DBName)
}

func (g getLockDefaults) Name() string { return "mysql+getlock (defaults)" }

func (g getLockDefaults) Capabilities() spec.Capabilities {
	return conformance.MustDeclare(g.url(g.h.server.Addr()))
}

func (g getLockDefaults) open(t testing.TB, addr string) dlock.Locker {
	l, err := dlock.Open(ctxFor(t, 30*time.Second), g.url(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (g getLockDefaults) NewLocker(t testing.TB) dlock.Locker { return g.open(t, g.h.server.Addr()) }
func (g getLockDefaults) RestartServers(t testing.TB)         { g.h.RestartServers(t) }
func (g getLockDefaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p := servertest.Proxy(t, g.h.server.Addr())
	return g.open(t, p.Addr()), p
}
