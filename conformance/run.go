package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// minUnit is the shortest TTL the suite gives a lease. Requests to a real server
// under -race on a loaded 2-core machine take tens of milliseconds at times; a TTL
// must leave room for that plus the drift allowance, or leases expire while they are
// being granted.
const minUnit = 250 * time.Millisecond

// Run checks every Property on the backend h gives, each as a named subtest. Run it
// under -race. Subtests run one after another; each makes its own clients and keys.
func Run(t *testing.T, h Harness) {
	caps := h.Capabilities()
	s := &suite{h: h, caps: caps, unit: max(caps.MinTTL, minUnit),
		backend: h.Name(), report: &results.File{Trials: 1}}
	results.SaveAtEnd(t, "conformance", s.backend, s.report)

	// Start whatever the harness starts lazily before taking the goroutine snapshot.
	warm := h.NewLocker(t)
	if err := warm.Close(); err != nil {
		t.Fatalf("closing the warm-up client: %v", err)
	}
	before := goleak.IgnoreCurrent()

	checks := map[spec.Property]func(*testing.T, *verdict){
		spec.MutualExclusion:  s.mutualExclusion,
		spec.DeadlockFreedom:  s.deadlockFreedom,
		spec.OwnerOnlyRelease: s.ownerOnlyRelease,
		spec.Expiry:           s.expiry,
		spec.Refresh:          s.refresh,
		spec.TryAcquire:       s.tryAcquire,
		spec.SimultaneousTry:  s.simultaneousTry,
		spec.Cancellation:     s.cancellation,
		spec.FencingMonotonic: s.fencingMonotonic,
		spec.KeyIsolation:     s.keyIsolation,
		spec.InputValidation:  s.inputValidation,
		spec.Close:            s.close,
		spec.ConcurrentUse:    s.concurrentUse,
		spec.DoneAndErr:       s.doneAndErr,
		spec.FIFO:             s.fifo,
		spec.NoGoroutineLeaks: func(t *testing.T, v *verdict) {
			// A closed client's connections may take a moment to wind down (gRPC
			// transports close asynchronously): look again for a few seconds.
			var left []string
			for end := time.Now().Add(5 * time.Second); ; {
				if left = clientLeaks(goleak.Find(before)); len(left) == 0 || time.Now().After(end) {
					break
				}
			}
			if len(left) > 0 {
				v.violated("goroutines left running after every client was closed:\n%s", strings.Join(left, "\n"))
			}
		},
	}
	for _, p := range spec.Properties {
		if p == spec.NoGoroutineLeaks {
			// The primitives' properties run before the leak check, which covers them.
			for _, run := range primitiveChecks {
				run(s, t)
			}
		}
		s.property(t, p, checks[p])
	}
}

// primitiveChecks run the properties of the primitives beyond the mutex (each file
// of a primitive appends its runner in init); a runner checks only what the
// backend declares (spec.Capabilities.Semaphore, …) and adds one cell per property
// through s.property.
var primitiveChecks []func(s *suite, t *testing.T)

type suite struct {
	h       Harness
	caps    spec.Capabilities
	unit    time.Duration // the shortest TTL the suite uses
	backend string
	report  *results.File
}

// verdict collects violations of the property under test. Anything else that goes
// wrong (a server error, a setup step failing) fails the subtest directly.
type verdict struct {
	mu         sync.Mutex
	violations []string
}

func (v *verdict) violated(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.violations = append(v.violations, fmt.Sprintf(format, args...))
}

func (v *verdict) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.violations...)
}

func (s *suite) property(t *testing.T, p spec.Property, check func(*testing.T, *verdict)) {
	t.Run(string(p), func(t *testing.T) {
		v := &verdict{}
		var evidence []string
		defer func() {
			c := propertyCell(s.backend, p, s.weak(p), t, evidence)
			if slices.Contains(s.caps.SometimesWeak, p) && c.Status != "failed" && c.Status != spec.NotApplicable {
				c.Expected = spec.Sometimes
				if c.Status = spec.Held; len(evidence) > 0 {
					c.Status, c.Violations = spec.Violated, 1
				}
			}
			s.report.Add(c)
		}()
		check(t, v)
		if t.Skipped() || t.Failed() {
			return
		}
		seen := v.list()
		weak := s.weak(p)
		if weak {
			if r, ok := s.h.(WeaknessReproducer); ok {
				if ev, handled := r.ReproduceWeakness(t, p); handled {
					// The weakness needs the harness's fault: without it the property holds.
					if len(seen) > 0 {
						t.Errorf("%s violated without the fault that the declared weakness needs:\n  %s", p, strings.Join(seen, "\n  "))
						return
					}
					seen = ev
				}
			}
		}
		switch {
		case slices.Contains(s.caps.SometimesWeak, p):
			evidence = seen
			if len(seen) > 0 {
				t.Logf("declared timing-dependent weakness reproduced this run (%d violations), e.g.: %s", len(seen), seen[0])
			} else {
				t.Logf("declared timing-dependent weakness: not seen this run")
			}
		case weak && len(seen) == 0:
			t.Errorf("%s is declared a weakness of this backend, but the violation did not reproduce: "+
				"the backend or its documentation changed", p)
		case weak:
			evidence = seen
			t.Logf("declared weakness reproduced (%d violations), e.g.: %s", len(seen), seen[0])
		case len(seen) > 0:
			t.Errorf("%s violated:\n  %s", p, strings.Join(seen, "\n  "))
		}
	})
}

// client returns a new client that is closed when t ends.
func (s *suite) client(t testing.TB) dlock.Locker {
	t.Helper()
	l := s.h.NewLocker(t)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// key returns a key no other test uses.
func key(t testing.TB, name string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "conformance/" + name + "/" + hex.EncodeToString(b[:])
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t testing.TB, l dlock.Locker, k string, opts ...dlock.Option) dlock.Lease {
	t.Helper()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q) on a free key: %v", k, err)
	}
	return ls
}

func release(t testing.TB, ls dlock.Lease) {
	t.Helper()
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release(%q): %v", ls.Key(), err)
	}
}

func isDone(ls dlock.Lease) bool {
	select {
	case <-ls.Done():
		return true
	default:
		return false
	}
}

// waitDone waits for ls to end and returns when it did.
func waitDone(t testing.TB, ls dlock.Lease, within time.Duration) (time.Time, bool) {
	t.Helper()
	select {
	case <-ls.Done():
		return time.Now(), true
	case <-time.After(within):
		return time.Time{}, false
	}
}

// sleepUntil sleeps until the moment at; the suite measures time-based properties, so
// here the passing of time is the subject, not a stand-in for a signal.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// propertyCell records one property's outcome in a conformance run.
func propertyCell(backend string, p spec.Property, weak bool, t *testing.T, evidence []string) results.Cell {
	c := results.Cell{Backend: backend, Scenario: "Conformance", Property: string(p), Trials: 1, Expected: spec.Held}
	if weak {
		c.Expected = spec.Violated
	}
	switch {
	case t.Skipped():
		c.Status, c.Expected = spec.NotApplicable, spec.NotApplicable
	case t.Failed():
		c.Status = "failed"
		c.Note("the subtest failed: see the test log")
	case weak:
		c.Status, c.Violations = spec.Violated, 1
	default:
		c.Status = spec.Held
	}
	for _, e := range evidence {
		c.Note("%s", e)
	}
	return c
}

// serverFrames mark the goroutines of a server that runs inside the test process (an
// embedded etcd member and its gRPC server side): they serve clients, they are not
// the clients', and come and go with the server's own work (a closed session's
// keep-alive stream winds down on the server's schedule).
var serverFrames = []string{
	"go.etcd.io/etcd/server/",
	"go.etcd.io/raft/",
	"google.golang.org/grpc/internal/transport.(*http2Server)",
	"google.golang.org/grpc.(*Server)",
}

// clientLeaks returns the goroutines goleak found (err, as goleak formats it) that
// are not a server's (serverFrames); nil when err is nil.
func clientLeaks(err error) []string {
	if err == nil {
		return nil
	}
	msg := err.Error()
	starts := goroutineHeader.FindAllStringIndex(msg, -1)
	if len(starts) == 0 {
		return []string{msg} // not goleak's format: keep it whole
	}
	var out []string
	for i, st := range starts {
		end := len(msg)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		g := strings.TrimRight(msg[st[0]:end], " ]\n")
		if !slices.ContainsFunc(serverFrames, func(f string) bool { return strings.Contains(g, f) }) {
			out = append(out, g)
		}
	}
	return out
}

// goroutineHeader starts each goroutine in goleak's report.
var goroutineHeader = regexp.MustCompile(`Goroutine \d+ in state `)
