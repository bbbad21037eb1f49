package dlocktest

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Deterministic simulation of the lease core and the primitives' client logic.
//
// Each seed makes a schedule (scenario): a few clients of one Store, each with a
// clock drift within the lease core's allowance, running a random workload of
// mutexes, sets of keys (AcquireAll), semaphores, read-write locks and elections
// — waiting or trying, auto-renewed or not, with retry strategies, contexts that
// end or are cancelled at any moment, refreshes, releases tried again after an
// error — while a director injects the Store's faults (partitions, a hung store,
// failed refreshes, lost replies, delayed grants, losses of every cause, Close at
// any moment) and every call to the store meets a fault drawn for it: it fails,
// hangs until its context ends, loses its reply after the store acted, or gets
// its reply late. Everything runs in a testing/synctest bubble: virtual time,
// no sleeps. The checks (simcheck_test.go) run as the schedule goes and at its
// end.
//
// A seed's schedule is the same on every run: the scenario, the clients'
// decisions and each call's fault come from the seed (a call's fault from the
// seed, the client, the call and how many such calls came before it). What Go's
// scheduler decides among goroutines runnable at one virtual moment is not; a
// failure is replayed to say how often it recurs.

var (
	simSeeds = flag.Int("sim.seeds", 0, "how many schedules TestSimulation runs (default: $DLOCK_SIM_SEEDS, else the CI budget)")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed, printing its schedule and history")
	simFirst = flag.Uint64("sim.first", 1, "the first seed TestSimulation runs")
)

// ciSeeds is the CI budget: about ten seconds without the race detector on a
// machine of 2 cores (raceSeeds with it, which is about three times slower a
// schedule).
const (
	ciSeeds   = 8000
	raceSeeds = 2500
)

// replays is how many times a failing seed is run again to say how often it fails.
const replays = 20

func simBudget(t *testing.T) int {
	if *simSeeds > 0 {
		return *simSeeds
	}
	if v := os.Getenv("DLOCK_SIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DLOCK_SIM_SEEDS=%q: want a positive number", v)
		}
		return n
	}
	if raceEnabled {
		return raceSeeds
	}
	return ciSeeds
}

// TestSimulation runs the budget of seeds (-sim.seeds, $DLOCK_SIM_SEEDS), or one
// seed (-sim.seed), and reports how many schedules it ran a second. A failing seed
// is printed with its schedule, what the checks found and the Store's history,
// then run again to tell how often it fails.
func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		r := runSeed(t, *simSeed, simOptions{})
		t.Logf("seed %d:\n%s", *simSeed, r.report())
		if r.failed() {
			t.Fail()
		}
		return
	}
	n := simBudget(t)
	start := time.Now()
	var calls int
	for seed := *simFirst; seed < *simFirst+uint64(n); seed++ {
		r := runSeed(t, seed, simOptions{})
		calls += r.calls
		if r.failed() {
			t.Errorf("seed %d failed (replay: go test ./dlocktest -run 'TestSimulation$' -sim.seed %d -v):\n%s", seed, seed, r.report())
			t.Errorf("seed %d fails in %d of %d replays", seed, failures(t, seed, simOptions{}), replays)
			return
		}
	}
	took := time.Since(start)
	t.Logf("%d schedules (seeds %d to %d, %d calls to the store) in %v: %.0f schedules/s",
		n, *simFirst, *simFirst+uint64(n)-1, calls, took.Round(time.Millisecond), float64(n)/took.Seconds())
}

// failures runs seed replays times and counts the runs that failed.
func failures(t *testing.T, seed uint64, o simOptions) int {
	k := 0
	for range replays {
		if runSeed(t, seed, o).failed() {
			k++
		}
	}
	return k
}

// runSeed runs seed's schedule in a synctest bubble of its own.
// A schedule that leaves goroutines blocked makes synctest.Test panic after
// simulate returned (its checks name them): the panic is its last violation.
func runSeed(t *testing.T, seed uint64, o simOptions) (r *simResult) {
	defer func() {
		if p := recover(); p != nil {
			if r == nil {
				r = &simResult{seed: seed}
			}
			r.violations = append(r.violations, fmt.Sprintf("synctest: %v", p))
		}
	}()
	synctest.Test(t, func(t *testing.T) { r = simulate(seed, o) })
	return r
}

// simResult is what one schedule found.
type simResult struct {
	seed       uint64
	schedule   string
	violations []string
	history    History
	log        []string
	calls      int
}

func (r *simResult) failed() bool { return len(r.violations) > 0 }

func (r *simResult) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule:\n%s", r.schedule)
	if r.failed() {
		fmt.Fprintf(&b, "violations:\n")
		for _, v := range r.violations {
			fmt.Fprintf(&b, "  - %s\n", v)
		}
	} else {
		fmt.Fprintf(&b, "no violation\n")
	}
	fmt.Fprintf(&b, "what the clients did:\n")
	for _, l := range r.log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprintf(&b, "the store's history:\n%s", r.history)
	return b.String()
}
