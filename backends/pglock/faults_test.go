package pglock_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// faultHarness runs the fault scenarios on a private server that it may crash and
// restart: holders in child processes (by URL), a server restart, a partitioned
// holder. Every client is opened from the URL of the mode it tests.
type faultHarness struct {
	server *servers.Postgres
	db     string
	scheme string // pglock.Scheme or pglock.AdvisoryScheme
	query  string // the URL's query
	name   string
}

func newFaultHarness(t *testing.T, scheme, query, name string) *faultHarness {
	p := servertest.NewPostgres(t, servers.PostgresOptions{})
	h := &faultHarness{server: p, db: servertest.PostgresDatabase(t, p), scheme: scheme, query: query, name: name}
	admin := pool(t, p.URL(h.db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin, pglock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	return h
}

func (h *faultHarness) url(addr string) string { return lockURL(h.scheme, addr, h.db, h.query) }

func (h *faultHarness) NewLocker(t testing.TB) dlock.Locker {
	return servertest.Open(t, h.url(h.server.Addr()))
}

func (h *faultHarness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare(h.url(h.server.Addr()))
}

func (h *faultHarness) Name() string { return h.name }

// URL is how a child process opens the same backend.
func (h *faultHarness) URL(t testing.TB) string { return h.url(h.server.Addr()) }

// Waiting counts the key's waiters: the queue's live rows, or the sessions
// waiting for its advisory lock.
func (h *faultHarness) Waiting(t testing.TB, key string) int {
	admin := pool(t, h.server.URL(h.db))
	defer admin.Close()
	if h.scheme == pglock.AdvisoryScheme {
		return advisoryWaiters(t, admin, key)
	}
	return queued(t, admin, key)
}

// RestartServers crashes the server (SIGKILL of its processes) and starts it again
// on its data.
func (h *faultHarness) RestartServers(t testing.TB) {
	servertest.CrashAndRestart(t, h.server)
}

func (h *faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p := servertest.Proxy(t, h.server.Addr())
	return servertest.Open(t, h.url(p.Addr())), p
}

// failoverHarness runs the failover scenarios on a primary and its streaming
// replica (asynchronous, or synchronous with sync). Its clients dial whichever
// server is the primary now; each failover leaves a fresh pair for the next trial.
type failoverHarness struct {
	sync     bool
	advisory bool
	name     string

	mu      sync.Mutex
	primary *servers.Postgres
	replica *servers.Postgres // nil after a failover
}

func newFailoverHarness(t *testing.T, sync, advisory bool, name string) *failoverHarness {
	h := &failoverHarness{sync: sync, advisory: advisory, name: name}
	h.start(t)
	t.Cleanup(h.close)
	return h
}

// start (re)starts the servers: a primary and a replica in sync, the tables made.
func (h *failoverHarness) start(t testing.TB) {
	h.close()
	p, r, err := servers.StartPostgresReplicaPair(ctxFor(t, 2*time.Minute), h.sync)
	if servers.IsMissing(err) && !servers.RequireServers() || servers.IsNoImage(err) {
		t.Skipf("postgres replica pair: %v", err) // servertest's policy
	}
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.primary, h.replica = p, r
	h.mu.Unlock()
	admin := pool(t, p.URL("postgres"))
	defer admin.Close()
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitInSync(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

func (h *failoverHarness) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range []*servers.Postgres{h.replica, h.primary} {
		if s != nil {
			s.Close()
		}
	}
	h.primary, h.replica = nil, nil
}

// addr is the primary's address; between two pairs (a fresh one starting), one
// where nothing listens.
func (h *failoverHarness) addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.primary == nil {
		return "127.0.0.1:1"
	}
	return h.primary.Addr()
}

func (h *failoverHarness) scheme() string {
	if h.advisory {
		return pglock.AdvisoryScheme
	}
	return pglock.Scheme
}

// NewLocker returns a client whose connections go to the current primary.
func (h *failoverHarness) NewLocker(t testing.TB) dlock.Locker {
	cfg, err := pgxpool.ParseConfig(h.primaryURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, h.addr())
	}
	if h.advisory {
		cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "2000"
	}
	p, err := pgxpool.NewWithConfig(ctxFor(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if h.advisory {
		return pglock.NewAdvisory(p, pglock.WithCheckInterval(advisoryCheck))
	}
	return pglock.New(p)
}

func (h *failoverHarness) primaryURL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.primary.URL("postgres")
}

// Capabilities: what the URL declares, and what depends on the replication, not on
// the URL: with asynchronous replication a promoted replica may lack the last grants
// of the lease table, and repeat a token (a fenced resource refuses the second
// writer). Advisory locks are not replicated at all, but their holder's session
// ends with the primary: its lease ends before the replica is promoted.
func (h *failoverHarness) Capabilities() spec.Capabilities {
	c := conformance.MustDeclare(lockURL(h.scheme(), h.addr(), "postgres", advisoryQueryIf(h.advisory)))
	if !h.advisory && !h.sync {
		if c.FaultOutcomes == nil {
			c.FaultOutcomes = map[spec.Scenario]spec.Status{}
		}
		c.FaultOutcomes[spec.Failover] = spec.Violated
		c.FaultOutcomes[spec.FailoverFencing] = spec.Violated
	}
	return c
}

func advisoryQueryIf(advisory bool) string {
	if advisory {
		return advisoryQuery
	}
	return ""
}

func (h *failoverHarness) Name() string { return h.name }

// PauseReplication makes the replica lag, on a fresh pair if the last one was
// failed over: an asynchronous one stops receiving, a synchronous one stops
// applying what it receives.
func (h *failoverHarness) PauseReplication(t testing.TB) {
	h.mu.Lock()
	fresh := h.replica == nil
	h.mu.Unlock()
	if fresh {
		h.start(t)
	}
	if err := h.replica.PauseReplication(ctxFor(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// Failover kills the primary and promotes the replica; clients dial it from now on.
func (h *failoverHarness) Failover(t testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := h.replica.Promote(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	h.primary.Close()
	h.primary, h.replica = h.replica, nil
}

// defaultsHarness opens advisory clients by a URL without session_timeout or
// check_interval: the server's own idle_session_timeout (none) and the default check
// interval (1s), for what depends on them: a restart, a cut-off and a hung holder.
type defaultsHarness struct{ h *faultHarness }

func (g defaultsHarness) Name() string                        { return "postgres+advisory (defaults)" }
func (g defaultsHarness) Capabilities() spec.Capabilities     { return g.h.Capabilities() }
func (g defaultsHarness) NewLocker(t testing.TB) dlock.Locker { return g.h.NewLocker(t) }
func (g defaultsHarness) RestartServers(t testing.TB)         { g.h.RestartServers(t) }
func (g defaultsHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	return g.h.NewPartitionedLocker(t)
}

// guardedFaults and guardedFailover run HolderPauseFenced and FailoverFencedWrite
// with every fencing guard as the resource too, on servers of their own
// (fencetest.Guards): a cell per guard.
type guardedFaults struct{ *faultHarness }

func (guardedFaults) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

type guardedFailover struct{ *failoverHarness }

func (guardedFailover) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

// TestFaults runs the suite's fault scenarios: a holder process killed or paused, a
// waiter killed, the server crashed and restarted while a lock is held, a holder cut
// off the network, the store hung, and failovers to an asynchronous and to a
// synchronous replica; the table's paused holder and its writer after a failover
// are refused by every fencing guard too.
func TestFaults(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		t.Parallel() // private servers: the cases wait out their TTLs side by side
		conformance.RunFaults(t, guardedFaults{newFaultHarness(t, pglock.Scheme, "", "postgres")})
	})
	t.Run("table-fifo", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFaultHarness(t, pglock.Scheme, "fifo=true", "postgres (fifo)"))
	})
	t.Run("advisory", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFaultHarness(t, pglock.AdvisoryScheme, advisoryQuery, "postgres+advisory"))
	})
	t.Run("advisory-defaults", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, defaultsHarness{newFaultHarness(t, pglock.AdvisoryScheme, "", "")})
	})
	t.Run("replica", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, guardedFailover{newFailoverHarness(t, false, false, "postgres (primary+async replica)")})
	})
	t.Run("replica-sync", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFailoverHarness(t, true, false, "postgres (primary+sync replica)"))
	})
	t.Run("advisory-replica", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, newFailoverHarness(t, false, true, "postgres+advisory (primary+replica)"))
	})
}
