package redislock_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/spec"
)

// faultConfig says what a faultHarness runs on.
type faultConfig struct {
	replica bool   // a master and an asynchronous replica (failover)
	ack     bool   // New with WithReplicaAck(1, ackTimeout)
	aof     string // persistence: "" (none) or an appendfsync policy
	clock   bool   // the server runs under libfaketime (its clock can jump)
	fifo    bool   // New with WithFIFO(true)
}

const ackTimeout = time.Second // WAIT answers in ~1ms when the replica is in sync; a loaded CI machine needs slack

// faultHarness runs New on private servers that it can restart, fail over, cut
// off and make jump in time. Its clients dial whichever server is the master now.
type faultHarness struct {
	cfg     faultConfig
	noClock error // why cfg.clock could not be honoured here (nil: it was, or was not asked)

	mu      sync.Mutex
	master  *servers.Redis
	replica *servers.Redis // nil without cfg.replica, or after a failover
	offset  time.Duration  // the server clock's offset (cfg.clock)
}

func newFaultHarness(t testing.TB, cfg faultConfig) *faultHarness {
	h := &faultHarness{cfg: cfg}
	if cfg.clock {
		if h.noClock = servers.RedisClockShiftable(); h.noClock != nil {
			h.cfg.clock = false
		}
	}
	h.start(t)
	t.Cleanup(h.close)
	return h
}

// start (re)starts the servers: a master, or a master and a replica in sync.
func (h *faultHarness) start(t testing.TB) {
	h.close()
	h.mu.Lock()
	defer h.mu.Unlock()
	var err error
	switch {
	case h.cfg.replica:
		h.master, h.replica, err = servers.StartRedisReplicaPair(startCtx(t))
	case h.cfg.clock:
		h.master, err = servers.StartRedis(startCtx(t), servers.RedisOptions{AOF: h.cfg.aof, FakeTimeOffset: "+0"})
	default:
		h.master, err = servers.StartRedis(startCtx(t), servers.RedisOptions{AOF: h.cfg.aof})
	}
	need(t, err)
}

func (h *faultHarness) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range []*servers.Redis{h.master, h.replica} {
		if r != nil {
			r.Close()
		}
	}
	h.master, h.replica = nil, nil
}

func (h *faultHarness) addr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.master.Addr()
}

func (h *faultHarness) options() []redislock.Option {
	opts := []redislock.Option{redislock.WithFIFO(h.cfg.fifo)}
	if h.cfg.ack {
		opts = append(opts, redislock.WithReplicaAck(1, ackTimeout))
	}
	return opts
}

// query is the URL query of the harness's configuration.
func (h *faultHarness) query() string {
	var q []string
	if h.cfg.ack {
		q = append(q, "wait_replicas=1")
	}
	if h.cfg.fifo {
		q = append(q, "fifo=true")
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
}

// newClient returns a client that dials the current master through dial.
func (h *faultHarness) newClient(t testing.TB, dial func(ctx context.Context, addr string) (net.Conn, error)) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: h.addr(),
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dial(ctx, h.addr())
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (h *faultHarness) NewLocker(t testing.TB) dlock.Locker {
	return redislock.New(h.newClient(t, dialTCP), h.options()...)
}

// Capabilities: what "redis" declares (an empty server comes back from a restart;
// Redis expires keys by its wall clock; a promoted asynchronous replica never saw the
// lock, unless WithReplicaAck), and one thing that depends on the server, not the
// URL: with appendfsync always the lock survives the crash.
func (h *faultHarness) Capabilities() spec.Capabilities {
	c := conformance.MustDeclare("redis://" + h.addr() + h.query())
	if h.cfg.aof == "always" {
		c.FaultOutcomes[spec.ServerRestart] = spec.Held
	}
	return c
}

// URL is how a child process opens the same backend.
func (h *faultHarness) URL(t testing.TB) string { return "redis://" + h.addr() + h.query() }

// RestartServers kills the server (a crash: nothing flushed beyond the AOF policy)
// and starts it again on the same port, keeping its data directory.
func (h *faultHarness) RestartServers(t testing.TB) {
	h.mu.Lock()
	m := h.master
	h.mu.Unlock()
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(startCtx(t), true); err != nil {
		t.Fatal(err)
	}
}

// JumpClock moves the server's wall clock forward by d.
func (h *faultHarness) JumpClock(t testing.TB, d time.Duration) {
	h.mu.Lock()
	h.offset += d
	offset, m := h.offset, h.master
	h.mu.Unlock()
	if err := m.ShiftClock(startCtx(t), fmt.Sprintf("+%ds", int(offset/time.Second))); err != nil {
		t.Fatal(err)
	}
}

// PauseReplication makes the replica stop receiving writes, on a fresh pair if the
// last one was failed over.
func (h *faultHarness) PauseReplication(t testing.TB) {
	h.mu.Lock()
	fresh := h.replica == nil
	h.mu.Unlock()
	if fresh {
		h.start(t)
	}
	if err := h.replica.PauseReplication(); err != nil {
		t.Fatal(err)
	}
}

// Failover kills the master and promotes the replica; clients dial it from now on.
func (h *faultHarness) Failover(t testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.master.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := h.replica.Promote(startCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.master.Close()
	h.master, h.replica = h.replica, nil
}

// NewPartitionedLocker returns a client whose connections go through a proxy that
// can blackhole them.
func (h *faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p, err := servers.NewProxy(h.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dial := func(ctx context.Context, _ string) (net.Conn, error) { return dialTCP(ctx, p.Addr()) }
	return redislock.New(h.newClient(t, dial), h.options()...), p
}

// The scenario sets: each wrapper exposes only the fault interfaces its servers
// support, so RunFaults runs exactly those scenarios.
type (
	// singleFaults: one server without persistence, under libfaketime.
	singleFaults struct{ h *faultHarness }
	// failoverFaults: a master and an asynchronous replica.
	failoverFaults struct{ h *faultHarness }
	// restartFaults: one server with appendfsync always.
	restartFaults struct{ h *faultHarness }
)

// Name names the configuration in the report.
func (h *faultHarness) Name() string {
	switch {
	case h.cfg.replica && h.cfg.ack:
		return "redis (master+replica, WithReplicaAck)"
	case h.cfg.replica:
		return "redis (master+replica)"
	case h.cfg.aof == "always":
		return "redis (appendfsync always)"
	case h.cfg.fifo:
		return "redis (fifo)"
	}
	return "redis"
}

func (s singleFaults) Name() string   { return s.h.Name() }
func (f failoverFaults) Name() string { return f.h.Name() }
func (r restartFaults) Name() string  { return r.h.Name() }

// UnavailableFaults: the clock jump, where the server's clock cannot be shifted
// (a server in a container on another kernel).
func (s singleFaults) UnavailableFaults() map[spec.Scenario]string {
	if s.h.noClock == nil {
		return nil
	}
	return map[spec.Scenario]string{spec.ClockJump: s.h.noClock.Error()}
}

func (s singleFaults) NewLocker(t testing.TB) dlock.Locker     { return s.h.NewLocker(t) }
func (s singleFaults) Capabilities() spec.Capabilities         { return s.h.Capabilities() }
func (s singleFaults) URL(t testing.TB) string                 { return s.h.URL(t) }
func (s singleFaults) RestartServers(t testing.TB)             { s.h.RestartServers(t) }
func (s singleFaults) JumpClock(t testing.TB, d time.Duration) { s.h.JumpClock(t, d) }
func (s singleFaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	return s.h.NewPartitionedLocker(t)
}

// guardedFaults and guardedFailover run the fenced scenarios (HolderPauseFenced;
// FailoverFencedWrite, where tokens repeat) with every fencing guard as the
// resource too, on servers of their own (fencetest.Guards): a cell per guard.
type (
	guardedFaults   struct{ singleFaults }
	guardedFailover struct{ failoverFaults }
)

func (guardedFaults) FenceGuards(t testing.TB) []conformance.FenceGuard   { return fencetest.Guards(t) }
func (guardedFailover) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

func (f failoverFaults) NewLocker(t testing.TB) dlock.Locker { return f.h.NewLocker(t) }
func (f failoverFaults) Capabilities() spec.Capabilities     { return f.h.Capabilities() }
func (f failoverFaults) PauseReplication(t testing.TB)       { f.h.PauseReplication(t) }
func (f failoverFaults) Failover(t testing.TB)               { f.h.Failover(t) }

func (r restartFaults) NewLocker(t testing.TB) dlock.Locker { return r.h.NewLocker(t) }
func (r restartFaults) Capabilities() spec.Capabilities     { return r.h.Capabilities() }
func (r restartFaults) RestartServers(t testing.TB)         { r.h.RestartServers(t) }

// TestFaults runs the fault scenarios on New. Expected (Capabilities.FaultOutcomes):
// holder crash, pause with fencing and partition hold; a restart without persistence,
// a server clock jump and an asynchronous failover violate mutual exclusion; with
// appendfsync always a restart holds; with WithReplicaAck the failover holds
// (grants are refused while the replica lags). On one server and on the failover
// pair the fencing guards decide the fenced writes too: every guard refuses the
// paused holder and the token handed out twice.
func TestFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		conformance.RunFaults(t, guardedFaults{singleFaults{newFaultHarness(t, faultConfig{clock: true})}})
	})
	t.Run("fifo", func(t *testing.T) {
		conformance.RunFaults(t, singleFaults{newFaultHarness(t, faultConfig{clock: true, fifo: true})})
	})
	t.Run("aof-always", func(t *testing.T) {
		conformance.RunFaults(t, restartFaults{newFaultHarness(t, faultConfig{aof: "always"})})
	})
	t.Run("replica", func(t *testing.T) {
		conformance.RunFaults(t, guardedFailover{failoverFaults{newFaultHarness(t, faultConfig{replica: true})}})
	})
	t.Run("replica-ack", func(t *testing.T) {
		conformance.RunFaults(t, failoverFaults{newFaultHarness(t, faultConfig{replica: true, ack: true})})
	})
}

// immortalWaiters is the fair mode with a deliberate flaw: every waiter the suite
// sees queued gets a deadline that never comes (as if the store did not drop waiters
// that stopped renewing their place), so a crashed waiter blocks the queue. A live
// waiter's renewal writes a finite deadline again, and the suite kills the crashing
// waiter right after it last looked at the queue: a renewal in between would leave
// the killed waiter a deadline that passes, and the flaw would not show. So the
// deadlines are set again every few milliseconds until the test ends: the last
// renewal before the kill is overwritten long before its waiter TTL (seconds)
// could pass.
type immortalWaiters struct {
	h     *faultHarness
	admin *redis.Client
	keys  *immortalKeys
}

// immortalKeys: the keys whose waiters are kept for ever, and the goroutine that
// keeps them so.
type immortalKeys struct {
	mu   sync.Mutex
	keys map[string]bool
}

func newImmortalWaiters(t *testing.T, h *faultHarness) immortalWaiters {
	w := immortalWaiters{h, client(t, h.addr()), &immortalKeys{keys: map[string]bool{}}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.keys.mu.Lock()
			keys := make([]string, 0, len(w.keys.keys))
			for k := range w.keys.keys {
				keys = append(keys, k)
			}
			w.keys.mu.Unlock()
			for _, k := range keys {
				// A failure (a scenario restarting the server) is left to show as
				// the flaw's absence: WaiterCrash would then hold, and the test fail.
				_ = w.immortalize(ctx, k)
			}
		}
	}()
	return w
}

func (w immortalWaiters) Name() string                        { return "redis (fifo, immortal waiters)" }
func (w immortalWaiters) NewLocker(t testing.TB) dlock.Locker { return w.h.NewLocker(t) }
func (w immortalWaiters) URL(t testing.TB) string             { return w.h.URL(t) }

func (w immortalWaiters) Capabilities() spec.Capabilities {
	c := w.h.Capabilities()
	c.FaultOutcomes[spec.WaiterCrash] = spec.Violated
	return c
}

// immortalize sets the deadline of every waiter queued on key to +inf.
func (w immortalWaiters) immortalize(ctx context.Context, key string) error {
	dl := redislock.DeadlineKey(key)
	waiters, err := w.admin.ZRange(ctx, dl, 0, -1).Result()
	if err != nil {
		return err
	}
	for _, m := range waiters {
		if err := w.admin.ZAdd(ctx, dl, redis.Z{Score: math.Inf(1), Member: m}).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (w immortalWaiters) Waiting(t testing.TB, key string) int {
	if err := w.immortalize(ctxFor(t, 10*time.Second), key); err != nil {
		t.Fatal(err)
	}
	w.keys.mu.Lock()
	w.keys.keys[key] = true
	w.keys.mu.Unlock()
	return waiting(t, w.admin, key)
}

// TestWaiterCrashCatchesImmortalWaiters: the suite's WaiterCrash scenario fails on a
// queue that keeps a crashed waiter for ever (declared Violated here, so that the
// test passes only if the violation shows).
func TestWaiterCrashCatchesImmortalWaiters(t *testing.T) {
	t.Setenv("DLOCK_FAULT_TRIALS", "1")
	h := newFaultHarness(t, faultConfig{fifo: true})
	conformance.RunFaults(t, newImmortalWaiters(t, h))
}
