package redlock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
)

// faultHarness runs New on 5 private masters that it can stop, restart, cut off and
// shift in time (master 0 runs with a shiftable clock).
type faultHarness struct {
	harness

	mu      sync.Mutex
	stopped []bool
	offsets []time.Duration // each master's clock offset
}

func newFaultHarness(t *testing.T) *faultHarness {
	rs := privateMasters(t, masters, true)
	return &faultHarness{harness: harness{rs: rs}, stopped: make([]bool, len(rs)), offsets: make([]time.Duration, len(rs))}
}

// URL is how a child process opens the same backend.
func (h *faultHarness) URL(t testing.TB) string { return url(h.rs) }

func (h *faultHarness) Nodes() int { return len(h.rs) }

// StopNodes kills masters (SIGKILL) until n of them are down.
func (h *faultHarness) StopNodes(t testing.TB, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	down := 0
	for i, r := range h.rs {
		if down == n {
			break
		}
		if !h.stopped[i] {
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			h.stopped[i] = true
		}
		down++
	}
}

// RestartNodes starts every killed master again, empty (no persistence).
func (h *faultHarness) RestartNodes(t testing.TB) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.rs {
		if h.stopped[i] {
			if err := r.Restart(ctxFor(t, startTimeout), false); err != nil {
				t.Fatal(err)
			}
			h.stopped[i] = false
		}
	}
}

// RestartServers kills every master and starts it again, empty.
func (h *faultHarness) RestartServers(t testing.TB) {
	h.StopNodes(t, len(h.rs))
	h.RestartNodes(t)
}

// JumpClock moves master 0's wall clock forward by d.
func (h *faultHarness) JumpClock(t testing.TB, d time.Duration) { h.JumpNodeClock(t, 0, d) }

// JumpNodeClock moves master i's wall clock forward by d.
func (h *faultHarness) JumpNodeClock(t testing.TB, i int, d time.Duration) {
	h.mu.Lock()
	h.offsets[i] += d
	offset := h.offsets[i]
	h.mu.Unlock()
	if err := h.rs[i].ShiftClock(ctxFor(t, startTimeout), fmt.Sprintf("+%ds", int(offset/time.Second))); err != nil {
		t.Fatal(err)
	}
}

// StopNode kills master i (SIGKILL).
func (h *faultHarness) StopNode(t testing.TB, i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.rs[i].Kill(); err != nil {
		t.Fatal(err)
	}
	h.stopped[i] = true
}

// StartNode starts master i again, empty (no persistence).
func (h *faultHarness) StartNode(t testing.TB, i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.rs[i].Restart(ctxFor(t, startTimeout), false); err != nil {
		t.Fatal(err)
	}
	h.stopped[i] = false
}

// NewPartitionedLocker returns a client whose connections to every master go through
// a proxy; its Link blackholes them all.
func (h *faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	var link proxies
	cs := make([]redis.UniversalClient, len(h.rs))
	for i, r := range h.rs {
		p, err := servers.NewProxy(r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		link = append(link, p)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return redlock.New(cs), link
}

// proxies is the link of a partitioned client: all its masters at once.
type proxies []*servers.Proxy

func (ps proxies) Blackhole() {
	for _, p := range ps {
		p.Blackhole()
	}
}

func (ps proxies) Restore() {
	for _, p := range ps {
		p.Restore()
	}
}

// TestFaults runs the fault scenarios on 5 masters. Expected: a crashed holder's lock
// frees after its TTL; a paused holder writes after its lease ended (no fencing, with
// or without a fencing resource); a partitioned holder's lease ends before anyone else
// is granted; 2 masters down keep the lock service up, 3 down give ErrUnavailable; a
// jump of one master's clock does not let a second client in; all 5 masters
// restarting without persistence do (Violated).
func TestFaults(t *testing.T) {
	conformance.RunFaults(t, newFaultHarness(t))
}
