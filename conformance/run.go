package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
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
	cr      *cellRun // the property running: its clients record into it
}

// verdict collects what a property's check saw go wrong, into the trial's history
// (as failed expectations, which the checker counts) and into a list the check
// may consult. Anything else that goes wrong (a server error, a setup step failing)
// fails the subtest directly.
type verdict struct {
	rec        *recorder
	mu         sync.Mutex
	violations []string
}

func (v *verdict) violated(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if v.rec != nil {
		v.rec.expect(false, "%s", msg)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.violations = append(v.violations, msg)
}

func (v *verdict) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.violations...)
}

// property runs check as the trials of p's cell: each trial records a history,
// which the checker decides against what p claims (claimsOf) and the violations
// check saw.
func (s *suite) property(t *testing.T, p spec.Property, check func(*testing.T, *verdict)) {
	t.Run(string(p), func(t *testing.T) {
		weak := s.weak(p)
		sometimes := slices.Contains(s.caps.SometimesWeak, p)
		c := results.Cell{Backend: s.backend, Scenario: "Conformance", Property: string(p), Expected: spec.Held}
		if weak {
			c.Expected = spec.Violated
		}
		r := newCellRun(t, &c, propertyTrials(p))
		s.cr = r
		defer func() {
			switch {
			case t.Skipped():
				c.Status, c.Expected = spec.NotApplicable, spec.NotApplicable
			case t.Failed():
				c.Status = "failed"
				c.Note("the subtest failed: see the test log")
			default:
				c.Status = cellStatus(&c)
				if sometimes {
					c.Expected = spec.Sometimes
				}
			}
			s.report.Add(c)
		}()
		for range r.trials() {
			v := &verdict{rec: r.rec}
			check(t, v)
			if t.Skipped() || t.Failed() {
				return
			}
			if weak {
				if rep, ok := s.h.(WeaknessReproducer); ok {
					seen := v.list()
					trialRecorders.Store(t, r.rec)
					ev, handled := rep.ReproduceWeakness(t, p)
					trialRecorders.Delete(t)
					if handled {
						// The weakness needs the harness's fault: without it the property holds.
						if len(seen) > 0 {
							t.Errorf("%s violated without the fault that the declared weakness needs:\n  %s", p, strings.Join(seen, "\n  "))
							return
						}
						r.rec.note("the harness injected the fault this weakness needs")
						for _, e := range ev {
							r.rec.expect(false, "%s", e)
						}
					}
				}
			}
			r.judge(s.claimsOf(p))
			if weak && !sometimes && c.Violations > 0 {
				break // a weakness shown once is shown
			}
		}
		switch {
		case sometimes:
			t.Logf("declared timing-dependent weakness: violated in %d of %d trials", c.Violations, c.Trials)
		case weak && c.Violations == 0:
			t.Errorf("%s is declared a weakness of this backend, but the violation did not reproduce in %d trials: "+
				"the backend or its documentation changed", p, c.Trials)
		case weak:
			t.Logf("declared weakness reproduced: %v", c.Evidence)
		case c.Violations > 0:
			t.Errorf("%s violated in %d of %d trials:\n  %s", p, c.Violations, c.Trials, strings.Join(c.Evidence, "\n  "))
		case c.Exercised == 0:
			t.Errorf("%s: none of %d trials exercised it: %v", p, c.Trials, c.Evidence)
		}
	})
}

// timingTrials lists the properties whose outcome may depend on timing: they run
// propertyTrials() trials, the others one.
var timingTrials = []spec.Property{spec.SimultaneousTry, spec.Cancellation, spec.FIFO, spec.NoGoroutineLeaks}

// propertyTrials is how many trials a property gets: $DLOCK_PROPERTY_TRIALS (default
// 1) for the timing-dependent ones, one for the others.
func propertyTrials(p spec.Property) int {
	if !slices.Contains(timingTrials, p) {
		return 1
	}
	if n, err := strconv.Atoi(os.Getenv("DLOCK_PROPERTY_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// injectsFaults lists the properties whose checks take a lock away behind its
// holder's back with the harness (KeyDeleter, Vanisher): their trials claim no
// exclusion — whether a cut-off holder learns of its loss before another client is
// granted is the fault scenarios' to judge (Partition), and a deleted key is the
// check's own doing.
var injectsFaults = []spec.Property{spec.OwnerOnlyRelease, spec.DeadlockFreedom, spec.DoneAndErr,
	spec.SemaphorePermitReturns, spec.SemaphoreDoneAndErr, spec.RWLeaseReturns, spec.RWDoneAndErr,
	spec.ElectionFailover, spec.MultiKeyAllOrNothing}

// claimsOf is what a property's trial claims beyond the check's own expectations:
// exclusion, except where the check injects a fault (injectsFaults), and fencing
// where the backend fences.
func (s *suite) claimsOf(p spec.Property) claims {
	switch {
	case p == spec.NoGoroutineLeaks:
		return claims{}
	case slices.Contains(injectsFaults, p):
		return claims{exercised: askedTheStore}
	case p == spec.FencingMonotonic:
		return claims{exclusion: true, fencing: s.caps.Fencing, zeroTokens: !s.caps.Fencing, exercised: askedTheStore}
	}
	return claims{exclusion: true, exercised: askedTheStore}
}

// askedTheStore is the least a property's trial must have done to count: ask the
// backend for a lock (or a primitive's lease).
func askedTheStore(v *view) (bool, string) {
	for _, e := range v.events {
		if (e.Op == OpAcquire || e.Op == OpTry) && e.Phase == Call {
			return true, ""
		}
	}
	return false, "no client asked the backend for anything"
}

// client returns a new client that is closed when t ends, recorded in the running
// property's histories.
func (s *suite) client(t testing.TB) dlock.Locker {
	t.Helper()
	l := s.h.NewLocker(t)
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if s.cr == nil {
		return l
	}
	return s.cr.rec.locker(l, s.cr.rec.name("client"))
}

// unmanaged returns a new client, recorded in the current trial's history like
// client's, that the caller closes (client's close with the test).
func (s *suite) unmanaged(t testing.TB, prefix string) dlock.Locker {
	t.Helper()
	l := s.h.NewLocker(t)
	if s.cr == nil {
		return l
	}
	return s.cr.rec.locker(l, s.cr.rec.name(prefix))
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
