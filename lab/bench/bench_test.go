package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/internal/measure"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestMain stops the servers the tests and benchmarks started, then checks that no
// goroutine is left.
func TestMain(m *testing.M) {
	code := m.Run()
	shared.Lock()
	if shared.e != nil {
		shared.e.close()
	}
	shared.Unlock()
	os.Exit(servertest.Finish(code))
}

// tiny is a configuration that runs every measurement briefly: a smoke test of the
// code, not a measurement.
var tiny = Config{
	Duration: 150 * time.Millisecond, Clients: 3, ManyClients: 4, Keys: 20,
	Rounds: 5, Warmup: 1, AllocCycles: 5, CrashTrials: 1, CrashTimeout: time.Second,
	Repeat: 2, Waiters: []int{2, 4},
	Force: true, // a smoke test runs on whatever machine it gets
}

// TestRunSmoke runs every measurement of every target briefly through Run and checks
// that each produced its numbers without errors, and that the report holds them.
// withPrimitives are the targets that have semaphores (and maybe read-write locks).
var withPrimitives = []string{"mem", "redis", "redlock(5)", "mysql", "mysql+getlock", "zk", "etcd", "postgres", "postgres+advisory"}

func TestRunSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var lines []string
	res, err := Run(ctx, tiny, func(s string) { lines = append(lines, s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 {
		t.Error("no progress reported")
	}
	want := len(Targets()) + len(baselines())
	if len(res.Rows) != want {
		t.Fatalf("%d rows, want %d (every target and every baseline)", len(res.Rows), want)
	}
	md := res.Markdown()
	for _, r := range res.Rows {
		if r.Skipped != "" {
			if servers.RequireServers() {
				t.Errorf("%s skipped under %s=1: %s", r.Name, servers.EnvRequire, r.Skipped)
			} else {
				t.Logf("%s skipped: %s", r.Name, r.Skipped)
			}
			continue
		}
		for _, e := range r.Errors {
			t.Errorf("%s: %s", r.Name, e)
		}
		if r.Uncontended == nil || r.Uncontended.N != tiny.Rounds || r.Allocs == nil {
			t.Errorf("%s: missing uncontended or allocation numbers: %+v", r.Name, r)
		}
		// A peer's waiters may sleep longer than tiny's window between their own tries
		// (redsync: 50–250 ms after a split vote of all three clients), so a peer may
		// make no grant in 150 ms: its contended window must have run, not granted.
		// dlock's backends wake their waiters at the release: they must grant.
		if r.Kind != Raw && (r.Contended == nil || r.ManyKeys == nil || r.Contended.Elapsed < tiny.Duration || r.ManyKeys.Ops == 0 ||
			r.Kind == Backend && r.Contended.Handoffs == 0) {
			t.Errorf("%s: missing contended or many-keys numbers: %+v", r.Name, r)
		}
		if r.Repeats == nil || len(r.Repeats.P50) != tiny.Repeat || r.Kind != Raw && len(r.Repeats.TransferRate) != tiny.Repeat {
			t.Errorf("%s: not every repetition measured: %+v", r.Name, r.Repeats)
		}
		if r.Kind != Raw {
			// The store's request counter must move: every store here counts requests.
			if s := r.Scaling; s == nil || len(s.Points) != len(tiny.Waiters) || r.Store != Memory && (s.Points[0].Requests <= 0 || r.Kind == Backend && s.Points[1].PerHandoff <= 0) {
				t.Errorf("%s: missing scaling numbers or store request counts: %+v", r.Name, s)
			}
		}
		if r.Kind != Raw && r.Store != Memory && (r.Crash == nil || len(r.Crash.Trials) != tiny.CrashTrials) {
			t.Errorf("%s: missing crash numbers: %+v", r.Name, r.Crash)
		}
		if r.Kind == Backend && (r.MultiKey == nil || r.MultiKey.Set.N == 0 || r.MultiKey.Ratio <= 0) {
			t.Errorf("%s: missing multi-key numbers: %+v", r.Name, r.MultiKey)
		}
		if elects := map[string]bool{"redis": true, "mysql": true, "zk": true, "etcd": true, "postgres": true}; elects[r.Name] && (r.Election == nil || len(r.Election.Trials) != tiny.CrashTrials) {
			t.Errorf("%s: missing election failover numbers: %+v", r.Name, r.Election)
		}
		if r.Baseline != "" && r.RawRatio <= 0 {
			t.Errorf("%s: no ratio to %s", r.Name, r.Baseline)
		}
		if !strings.Contains(md, "| "+mdEscape(r.Name)+" |") {
			t.Errorf("Markdown has no row for %s", r.Name)
		}
		if p := r.Primitives; slices.Contains(withPrimitives, r.Name) && (p == nil || p.Semaphore == nil || p.PermitsPerSec <= 0 || p.ReadLock && p.SharedPerSec <= 0) {
			t.Errorf("%s: missing the primitives' numbers: %+v", r.Name, p)
		}
	}
	if !strings.Contains(md, "semaphore ÷ mutex") {
		t.Error("Markdown has no table of the primitives")
	}
	// The cut must reach the holder's connections: GET_LOCK frees the lock as soon as
	// its connection closes, long before the timeout (without the cut the waiter
	// would time out instead). A TTL lock, on the other hand, stays taken until its
	// TTL: a waiter that got it sooner would mean the holder never had it.
	// PostgreSQL's advisory locks, too, end with the session the server sees close.
	for _, n := range []string{"mysql GET_LOCK", "postgres+advisory", "pg_advisory_lock"} {
		if r := res.Row(n); r != nil && r.Crash != nil && r.Crash.Max > tiny.CrashTimeout/2 {
			t.Errorf("%s freed %v after the holder's connection was cut; want well under %v", n, r.Crash.Max, tiny.CrashTimeout/2)
		}
	}
	for _, n := range []string{"redis", "postgres"} {
		if r := res.Row(n); r != nil && r.Crash != nil && r.Crash.P50 < tiny.CrashTimeout-crashHold-50*time.Millisecond {
			t.Errorf("%s: waiter got the lock %v after the cut, before the TTL %v ran out", n, r.Crash.P50, tiny.CrashTimeout)
		}
	}
	if len(res.Checks) < 13 {
		t.Errorf("%d checks, want the 13 ratios and the wait and scaling checks of each backend", len(res.Checks))
	}
	if !res.Load.Forced && !res.Load.Quiet() || res.Load.Before == "" || res.Load.After == "" {
		t.Errorf("load not recorded: %+v", res.Load)
	}
	if !strings.Contains(md, "Waiters on one key") || !strings.Contains(md, "at the start") {
		t.Error("Markdown has no scaling table or load sentence")
	}
	js, err := res.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := json.Unmarshal(js, &back); err != nil || len(back.Rows) != len(res.Rows) || len(back.Checks) != len(res.Checks) {
		t.Fatalf("JSON does not round-trip: %v", err)
	}
	t.Log("\n" + md)
}

func TestSelect(t *testing.T) {
	ts, err := Select([]string{"@redis5", "zk"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(targetNames(ts), ","); got != "redlock(5),redsync(5),zk" {
		t.Fatalf("Select(@redis5, zk) = %s", got)
	}
	if _, err := Select([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Select(nope) = %v, want an error naming it", err)
	}
	if _, err := Run(context.Background(), Config{Skip: []Measurement{"nope"}}, nil); err == nil {
		t.Fatal("Run accepted an unknown measurement")
	}
}

func TestChecks(t *testing.T) {
	ns := func(ds ...time.Duration) []time.Duration { return ds }
	res := &Results{Rows: []Row{
		// Paired by repetition: 105/100, 120/100, 100/100 → median 1.05.
		{Name: "redis", Kind: Backend, Repeats: &Repeats{P50: ns(105, 120, 100), RawRatio: []float64{1.2, 1.0, 1.1}}, Allocs: &Allocs{PerCycle: 26}},
		{Name: "redlock(5)", Kind: Backend, Scaling: &Scaling{Points: []ScalePoint{{Waiters: 8, TransferRate: 100, PerHandoff: 10}, {Waiters: 100, TransferRate: 60, PerHandoff: 12}}}},
		{Name: "bsm/redislock", Kind: Peer, Repeats: &Repeats{P50: ns(100, 100, 100)}},
		{Name: "etcd", Kind: Backend, Repeats: &Repeats{P50: ns(106, 106, 106), TransferRate: []float64{300, 100, 600}, MaxOverMean: []float64{10.1, 3, 11}},
			Scaling: &Scaling{Points: []ScalePoint{{Waiters: 8, TransferRate: 100, PerHandoff: 10}, {Waiters: 100, TransferRate: 49, PerHandoff: 15}}}},
		{Name: "etcd-mutex", Kind: Peer, Repeats: &Repeats{P50: ns(100, 100, 100), TransferRate: []float64{100, 100, 100}}},
		{Name: "zk", Kind: Backend, Repeats: &Repeats{P50: ns(100)}},
		{Name: "redsync(5)", Kind: Peer, Errors: []string{"uncontended: failed"}},
		{Name: "redis+setnx/getset", Kind: Backend, Repeats: &Repeats{MaxOverMean: []float64{500}}},
	}}
	got := map[string]Check{}
	for _, c := range checks(res) {
		got[c.Claim] = c
	}
	for claim, want := range map[string]struct {
		met     bool
		missing string
		value   float64
	}{
		"redis ≤ 1.05× bsm/redislock (uncontended p50)":                                 {met: true, value: 1.05}, // the median, exactly at the limit
		"redis ≤ 1.1× raw SET NX PX + DEL (uncontended p50)":                            {met: true, value: 1.1},
		"etcd ≤ 1.05× etcd-mutex (uncontended p50)":                                     {met: false, value: 1.06},
		"etcd ≥ 3× etcd-mutex (contended hand-offs/s)":                                  {met: true, value: 3}, // median of 3, 1, 6
		"zk ≤ 1.0× zk.Lock (uncontended p50)":                                           {missing: "zk.Lock"},
		"redlock(5) ≤ 1.0× redsync(5) (uncontended p50)":                                {missing: "redlock(5)"},
		"redis ≤ 25 allocations per cycle":                                              {met: false, value: 26},
		"etcd: longest wait ≤ 5× mean wait (8 clients)":                                 {met: false, value: 10.1},
		"etcd: hand-offs/s with 100 waiters ≥ 0.7× with 8":                              {met: false, value: 0.49},
		"etcd: store requests per hand-off with 100 waiters ≤ 1.2× with 8 (flat)":       {met: false, value: 1.5},
		"redlock(5): hand-offs/s with 100 waiters ≥ 0.5× with 8":                        {met: true, value: 0.6},
		"redlock(5): store requests per hand-off with 100 waiters ≤ 1.2× with 8 (flat)": {met: true, value: 1.2},
	} {
		c, ok := got[claim]
		if !ok {
			t.Errorf("no check %q", claim)
			continue
		}
		if c.Met != want.met || c.Missing != want.missing || want.missing == "" && math.Abs(c.Value-want.value) > 1e-9 {
			t.Errorf("%s: met %v missing %q value %.3f; want met %v missing %q value %.3f", c.Claim, c.Met, c.Missing, c.Value, want.met, want.missing, want.value)
		}
	}
	for claim := range got {
		if strings.HasPrefix(claim, "mysql") || strings.HasPrefix(claim, "postgres") || strings.HasPrefix(claim, "redis+setnx") {
			t.Errorf("check reported for a target not selected, or for a study variant: %q", claim)
		}
	}
}

// TestRepeatScaling: the scaling measurement is repeated, the table shows the
// repetition whose rate ratio is the median, and the checks judge the median of
// every repetition's ratios (each shown), not the one repetition shown.
func TestRepeatScaling(t *testing.T) {
	run := func(rate100, per100 float64) []ScalePoint {
		return []ScalePoint{{Waiters: 8, TransferRate: 100, PerHandoff: 10}, {Waiters: 100, TransferRate: rate100, PerHandoff: per100}}
	}
	runs := [][]ScalePoint{run(90, 10), run(50, 20), run(70, 15)}
	i := 0
	s, err := repeatScaling(3, func() (*Scaling, error) { i++; return &Scaling{Points: runs[i-1]}, nil })
	if err != nil || i != 3 || len(s.Runs) != 3 {
		t.Fatalf("repeatScaling ran %d times, kept %d runs, error %v; want 3, 3, nil", i, len(s.Runs), err)
	}
	if s.Ratio() != 0.7 {
		t.Errorf("shown repetition's ratio %.2f, want the median's 0.70", s.Ratio())
	}
	got := map[string]Check{}
	for _, c := range checks(&Results{Rows: []Row{{Name: "redis", Kind: Backend, Scaling: s}}}) {
		got[c.Claim] = c
	}
	for claim, want := range map[string][]float64{
		"redis: hand-offs/s with 100 waiters ≥ 0.7× with 8":                        {0.9, 0.5, 0.7},
		"redis: store requests per hand-off with 100 waiters ≤ 1.2× with 8 (flat)": {1, 2, 1.5},
	} {
		c := got[claim]
		if !slices.Equal(c.Values, want) || c.Value != median(want) {
			t.Errorf("%s: values %v (median %.2f), want %v (median %.2f)", claim, c.Values, c.Value, want, median(want))
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestWaitQuiet: a run below its limit goes ahead at once; above it, it waits, then
// refuses with ErrBusy, unless forced — and a forced run is never called quiet.
func TestWaitQuiet(t *testing.T) {
	if loadavg() == "" {
		t.Skip("no /proc/loadavg")
	}
	nop := func(string) {}
	l, err := waitQuiet(context.Background(), 1e6, time.Minute, false, false, nop)
	if err != nil || !l.Quiet() || l.Forced {
		t.Fatalf("below the limit: %+v, %v; want quiet", l, err)
	}
	start := time.Now()
	l, err = waitQuiet(context.Background(), 1e-9, 50*time.Millisecond, false, false, nop)
	if !errors.Is(err, ErrBusy) || l.Quiet() || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("above the limit: %+v, %v after %v; want ErrBusy after waiting 50ms", l, err, time.Since(start))
	}
	if !strings.Contains(err.Error(), l.Before) {
		t.Errorf("ErrBusy does not say the load: %v", err)
	}
	l, err = waitQuiet(context.Background(), 1e-9, time.Hour, true, false, nop)
	if err != nil || !l.Forced || l.Quiet() || !strings.Contains(l.Sentence(), "NOT QUIET") {
		t.Fatalf("forced: %+v, %v; want a forced run at once, marked not quiet", l, err)
	}
	start = time.Now()
	l, err = waitQuiet(context.Background(), 1e-9, 50*time.Millisecond, false, true, nop)
	if err != nil || !l.Forced || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("forced after waiting: %+v, %v after %v; want a run marked not quiet after 50ms", l, err, time.Since(start))
	}
}

// shared is the one set of servers the benchmarks use.
var shared struct {
	sync.Mutex
	e *env
}

// benchEnv returns the benchmarks' servers, starting those of stores on first use;
// it skips (or, with DLOCK_REQUIRE_SERVERS=1, fails) b when one is missing.
func benchEnv(b *testing.B, stores ...Store) *env {
	shared.Lock()
	defer shared.Unlock()
	if shared.e == nil {
		shared.e = newEnv()
	}
	ctx, cancel := context.WithTimeout(context.Background(), servers.DefaultStartTimeout)
	defer cancel()
	shared.e.start(ctx, stores...)
	for _, s := range stores {
		if err := shared.e.missing[s]; err != nil {
			if servers.IsMissing(err) && !servers.RequireServers() {
				b.Skip(err)
			}
			b.Fatal(err)
		}
	}
	return shared.e
}

// eachTarget runs f as a sub-benchmark for every target.
func eachTarget(b *testing.B, f func(b *testing.B, e *env, t Target)) {
	for _, t := range Targets() {
		b.Run(slug(t.Name), func(b *testing.B) { f(b, benchEnv(b, t.Store), t) })
	}
}

// BenchmarkUncontended measures b.N interleaved rounds of the raw baseline and of
// every target compared with it (one sub-benchmark per baseline) and reports each
// one's p50 and p99, each target's ratio to raw, and the ratios between a
// backend and its peer where both are in the group:
//
//	go test -run '^$' -bench Uncontended -benchtime 300x ./internal/bench
//
// Sub-benchmarks: mem, redis, redis5, mysql, getlock, zk, etcd, postgres, advisory.
func BenchmarkUncontended(b *testing.B) {
	bases := map[string]baseline{}
	for _, bl := range baselines() {
		bases[bl.Name] = bl
	}
	groups := map[string][]Target{}
	var names []string
	for _, t := range Targets() {
		g := bases[t.Baseline].ID
		if g == "" {
			g = t.Name
		}
		if groups[g] == nil {
			names = append(names, g)
		}
		groups[g] = append(groups[g], t)
	}
	for _, g := range names {
		ts := groups[g]
		b.Run(slug(g), func(b *testing.B) {
			e := benchEnv(b, ts[0].Store)
			var base *baseline
			if bl, ok := bases[ts[0].Baseline]; ok {
				base = &bl
			}
			b.ResetTimer()
			raw, lats, errs, err := uncontended(context.Background(), e.ep, base, ts, DefaultConfig.TTL, DefaultConfig.Warmup, b.N)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			res := &Results{}
			if base != nil {
				res.Rows = append(res.Rows, Row{Name: base.Name, Kind: Raw, Uncontended: &raw, Repeats: &Repeats{P50: []time.Duration{raw.P50}}})
				b.ReportMetric(float64(raw.P50.Microseconds()), "raw-p50-µs")
			}
			for i, t := range ts {
				if errs[i] != nil {
					b.Fatalf("%s: %v", t.Name, errs[i])
				}
				row := Row{Name: t.Name, Kind: t.Kind, Uncontended: &lats[i], Repeats: &Repeats{P50: []time.Duration{lats[i].P50}}}
				if base != nil {
					row.Repeats.RawRatio = []float64{float64(lats[i].P50) / float64(raw.P50)}
				}
				res.Rows = append(res.Rows, row)
				b.ReportMetric(float64(lats[i].P50.Microseconds()), slug(t.Name)+"-p50-µs")
				b.ReportMetric(float64(lats[i].P99.Microseconds()), slug(t.Name)+"-p99-µs")
				if base != nil {
					b.ReportMetric(float64(lats[i].P50)/float64(raw.P50), slug(t.Name)+"/raw")
				}
			}
			reportChecks(b, res)
		})
	}
}

// reportChecks reports, as metrics, the ratios that res has both sides of.
func reportChecks(b *testing.B, res *Results) {
	for _, c := range checks(res) {
		if c.Missing == "" && !strings.Contains(c.Claim, ": ") {
			b.ReportMetric(c.Value, "check:"+strings.ReplaceAll(strings.Fields(c.Claim)[0]+"/"+strings.Fields(c.Claim)[3], " ", ""))
			b.Logf("%s: %.2f (met: %v)", c.Claim, c.Value, c.Met)
		}
	}
}

// BenchmarkContended runs DefaultConfig.Clients clients of each target on one key
// for DefaultConfig.Duration per iteration (one iteration with the default
// -benchtime) and reports hand-offs/s, the longest wait, max/mean wait and Jain's
// index.
func BenchmarkContended(b *testing.B) {
	c := DefaultConfig
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		for b.Loop() {
			r, err := contended(context.Background(), e.ep, t, c.TTL, c.Clients, c.Duration)
			if err != nil {
				b.Fatal(err)
			}
			b.Log(r)
			b.ReportMetric(r.Rate, "grants/s")
			b.ReportMetric(r.TransferRate, "handoffs/s")
			b.ReportMetric(float64(r.Wait.Max.Microseconds()), "max-wait-µs")
			b.ReportMetric(r.MaxOverMean(), "max/mean-wait")
			b.ReportMetric(r.Jain, "jain")
		}
	})
}

// BenchmarkScaling runs the contended measurement of each target with
// DefaultWaiters clients in turn and reports hand-offs/s and the store's requests
// per hand-off for each:
//
//	go test -run '^$' -bench Scaling ./internal/bench
func BenchmarkScaling(b *testing.B) {
	c := DefaultConfig
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		for b.Loop() {
			s, err := scaling(context.Background(), e, t, c.TTL, c.Waiters, c.Duration)
			if err != nil {
				b.Fatal(err)
			}
			b.Log(s)
			for _, p := range s.Points {
				b.ReportMetric(p.TransferRate, fmt.Sprintf("handoffs/s@%d", p.Waiters))
				if p.PerHandoff > 0 {
					b.ReportMetric(p.PerHandoff, fmt.Sprintf("requests/handoff@%d", p.Waiters))
				}
			}
		}
	})
}

// BenchmarkManyKeys runs DefaultConfig.ManyClients clients of each target over
// DefaultConfig.Keys keys for DefaultConfig.Duration per iteration and reports the
// acquire+release cycles per second.
func BenchmarkManyKeys(b *testing.B) {
	c := DefaultConfig
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		for b.Loop() {
			r, err := manyKeys(context.Background(), e.ep, t, c.TTL, c.ManyClients, c.Keys, c.Duration)
			if err != nil {
				b.Fatal(err)
			}
			b.Log(r)
			b.ReportMetric(r.Rate, "cycles/s")
			b.ReportMetric(float64(r.Latency.P99.Microseconds()), "cycle-p99-µs")
		}
	})
}

// BenchmarkCrash measures, per iteration, the time another client waits for a lock
// whose holder vanished (see crash), with DefaultConfig.CrashTimeout as the lease TTL
// or session timeout.
func BenchmarkCrash(b *testing.B) {
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		if t.CrashNote == nil {
			b.Skip("no server to cut the holder off from")
		}
		for b.Loop() {
			r, err := crash(context.Background(), e, t, DefaultConfig.CrashTimeout, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%v after the cut (%s)", r.P50, r.Timeout)
			b.ReportMetric(float64(r.P50.Milliseconds()), "ms-to-next-holder")
		}
	})
}

// BenchmarkAllocs counts the heap allocations per acquire+release cycle of each
// target and of each raw baseline (allocs/op, whole process: an embedded etcd
// server's allocations are counted too).
func BenchmarkAllocs(b *testing.B) {
	ctx := context.Background()
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		l, err := t.Open(ctx, e.ep, DefaultConfig.TTL)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		k := key(e.ep, t.Name, "ba")
		b.ReportAllocs()
		for b.Loop() {
			if err := measure.AcquireCycle(ctx, l, k, dlock.WithTTL(DefaultConfig.TTL)); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bl := range baselines() {
		b.Run("raw-"+bl.ID, func(b *testing.B) {
			e := benchEnv(b, bl.Store)
			cycle, closeFn, err := bl.open(ctx, e.ep, key(e.ep, "raw-"+string(bl.Store)+"-"+slug(bl.Name), "ba"))
			if err != nil {
				b.Fatal(err)
			}
			defer closeFn()
			b.ReportAllocs()
			for b.Loop() {
				if err := cycle(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPrimScalingRows: a primitive's scaling shows as a row of its own, under the
// mutex's columns of waiters (a number it was not measured with shows "–"), and
// gets the flatness targets of the mutex.
func TestPrimScalingRows(t *testing.T) {
	pts := func(ns ...int) []ScalePoint {
		var out []ScalePoint
		for _, n := range ns {
			out = append(out, ScalePoint{Waiters: n, TransferRate: 100, PerHandoff: 10})
		}
		return out
	}
	res := &Results{Rows: []Row{{Name: "redis", Kind: Backend, Scaling: &Scaling{Points: pts(8, 32, 100)},
		PrimScaling: []PrimScale{{Primitive: "semaphore(4)", Scaling: &Scaling{Points: pts(8, 100)}}}}}}
	md := res.scalingMarkdown()
	if !strings.Contains(md, "| redis semaphore(4) | 100; 10.0 | – | 100; 10.0 |") {
		t.Errorf("the semaphore's row is not under the mutex's columns:\n%s", md)
	}
	found := false
	for _, c := range checks(res) {
		found = found || c.Claim == "redis semaphore(4): hand-offs/s with 100 waiters ≥ 0.7× with 8"
	}
	if !found {
		t.Errorf("no flatness target for the semaphore: %+v", checks(res))
	}
}
