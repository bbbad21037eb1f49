package conformance

import (
	"flag"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

var trialsFlag = flag.Int("faults.trials", 0, "trials per fault scenario (default 3, or $DLOCK_FAULT_TRIALS)")

// defaultTrials is the number of trials per scenario: -faults.trials, else
// $DLOCK_FAULT_TRIALS, else 3.
func defaultTrials() int {
	if *trialsFlag > 0 {
		return *trialsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("DLOCK_FAULT_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// trials is how many trials RunFaults gives s: defaultTrials(), or more if FaultTrials asks.
func trials(c spec.Capabilities, s spec.Scenario) int { return max(defaultTrials(), c.FaultTrials[s]) }

// RunFaults runs every scenario (spec.Scenarios) that the harness enables, as named
// subtests, each for several trials (3, or -faults.trials, or $DLOCK_FAULT_TRIALS;
// more where the declaration's FaultTrials asks). A scenario the harness does not
// enable is skipped and reported not applicable. An outcome that differs from what
// the declaration expects (spec.Capabilities.Expect) fails the subtest.
func RunFaults(t *testing.T, h Harness) {
	caps := h.Capabilities()
	backend := h.Name()
	own := &results.File{Trials: defaultTrials()}
	results.SaveAtEnd(t, "faults", backend, own)
	f := &faults{h: h, caps: caps, backend: backend, trials: defaultTrials(), own: own}
	var unavailable map[spec.Scenario]string
	if l, ok := h.(FaultLimiter); ok {
		unavailable = l.UnavailableFaults()
	}
	for _, x := range append(mutexSubject(f).runs(spec.Scenarios), primitiveFaults(f)...) {
		t.Run(string(x.s), func(t *testing.T) {
			c := results.Cell{Backend: backend, Scenario: string(x.s), Property: string(spec.MutualExclusion), Expected: caps.Expect(spec.MutexScenarioOf(x.s))}
			if reason, ok := caps.Inapplicable[spec.MutexScenarioOf(x.s)]; ok {
				c.Status, c.Expected, c.Evidence = spec.NotApplicable, spec.NotApplicable, []string{"not applicable: " + reason}
				f.add(c)
				t.Skipf("%s: not applicable: %s", x.s, reason)
			}
			if reason, ok := unavailable[spec.MutexScenarioOf(x.s)]; ok && x.ok {
				c.Status, c.Expected, c.Evidence = spec.NotApplicable, spec.NotApplicable, []string{"not applicable here: " + reason}
				f.add(c)
				t.Skipf("%s: not applicable here: %s", x.s, reason)
			}
			if !x.ok || c.Expected == spec.NotApplicable {
				c.Status, c.Expected = spec.NotApplicable, spec.NotApplicable
				f.add(c)
				if x.ok {
					t.Skipf("%s: not applicable to this backend (as declared: it has no fencing tokens)", x.s)
				}
				t.Skipf("%s: the harness does not enable this scenario", x.s)
			}
			r := newCellRun(t, &c, x.trials)
			f.cr = r
			x.fn(t, r)
			if t.Failed() {
				return
			}
			if c.Status == "" {
				c.Status = cellStatus(&c)
			}
			f.add(c)
			if c.Surprise() {
				t.Errorf("%s on %s: %s, but the backend's capabilities expect %s; evidence: %v", x.s, backend, c.ShortStatus(), c.Expected, c.Evidence)
			} else {
				t.Logf("%s: %s as expected; %v", x.s, c.ShortStatus(), c.Evidence)
			}
		})
	}
}

// primitiveFaults returns the fault scenarios of the primitives beyond the mutex
// (each file of a primitive appends a maker in init). A maker returns nothing for a
// backend that does not declare its primitive.
func primitiveFaults(f *faults) []run {
	var out []run
	for _, m := range primitiveFaultMakers {
		out = append(out, m(f)...)
	}
	return out
}

var primitiveFaultMakers []func(f *faults) []run

// run is one scenario of RunFaults: its name, whether the harness enables it, and
// the function that runs its trials and fills the cell.
type run struct {
	s      spec.Scenario
	ok     bool
	trials int // exercised trials wanted
	fn     func(*testing.T, *cellRun)
}

type faults struct {
	h         Harness
	caps      spec.Capabilities
	backend   string
	trials    int
	own       *results.File // saved to $DLOCK_REPORT_DIR
	cr        *cellRun      // the scenario running: its clients record into it
	leaseFact *cellRun      // LeaderKillLease, measured by the mutex's leaderKill
	writeFact *cellRun      // FailoverFencedWrite, measured by failoverFencing
}

func (f *faults) add(c results.Cell) { f.own.Add(c) }

// client returns a new client of the backend, recorded in the running scenario's
// histories.
func (f *faults) client(t testing.TB) dlock.Locker {
	l := f.h.NewLocker(t)
	t.Cleanup(func() { _ = l.Close() })
	return f.cr.rec.locker(l, f.cr.rec.name("client"))
}

// leaseTTL is the TTL fault scenarios give their leases: long enough for a child
// process to start and be signalled, short enough to wait out.
func (f *faults) leaseTTL() time.Duration { return max(f.caps.MinTTL, 2*time.Second) }

// freeBound is how long a dead holder's lock may take to free. For a session store
// it is capped at a minute: a store that keeps a silent holder's lock for hours
// (GET_LOCK's default wait_timeout is 8h) shows it by keeping it that minute.
func (f *faults) freeBound(ttl time.Duration) time.Duration {
	if f.caps.PerLeaseTTL {
		return ttl + 10*time.Second
	}
	return min(f.caps.SessionTimeout+10*time.Second, time.Minute)
}

// grantLog records when grants happened and signals each one.
type grantLog struct {
	mu     sync.Mutex
	at     []time.Time
	signal chan struct{}
}

func (g *grantLog) add(at time.Time) {
	g.mu.Lock()
	g.at = append(g.at, at)
	g.mu.Unlock()
	select {
	case g.signal <- struct{}{}:
	default:
	}
}

// waitFor waits until n grants happened after since and returns the first of them.
func (g *grantLog) waitFor(n int, since time.Time, within time.Duration) (time.Time, bool) {
	timeout := time.After(within)
	for {
		g.mu.Lock()
		var after []time.Time
		for _, at := range g.at {
			if at.After(since) {
				after = append(after, at)
			}
		}
		g.mu.Unlock()
		if len(after) >= n {
			return after[0], true
		}
		select {
		case <-g.signal:
		case <-timeout:
			return time.Time{}, false
		}
	}
}
