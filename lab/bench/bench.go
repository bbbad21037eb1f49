// Package bench measures every dlock backend and every peer (the lock libraries
// people use today, package peers) in one process, against one set of real servers
// started by internal/servers: one Redis, five independent Redis masters, MariaDB,
// ZooKeeper, PostgreSQL and one etcd member in a process of its own. It is what `dlock-lab bench` prints and what
// `go test -bench . ./internal/bench` runs.
//
// For each target it measures (package measure holds the measurements):
//   - uncontended acquire+release p50/p99, interleaved round by round with the raw
//     round trips of its store (SET NX PX + DEL, INSERT + DELETE,
//     pg_try_advisory_lock + pg_advisory_unlock, …), and the ratio;
//   - contended hand-offs per second with Config.Clients clients on one key, the
//     longest and mean wait and Jain's fairness index over the clients;
//   - the same with Config.Waiters clients (8, 32, 100), and the requests the store's
//     servers counted per hand-off: whether waiting costs grow with the waiters;
//   - many-keys throughput, Config.ManyClients clients cycling over Config.Keys keys;
//   - the time another client waits for the lock after its holder vanished (its
//     links cut through servers.Proxy, never released), with the TTL or session
//     timeout that frees it;
//   - heap allocations per acquire+release cycle (whole-process counts: compare with
//     the raw row).
//
// The uncontended and contended measurements run Config.Repeat times; rows show the
// median repetition and the checks (the targets) the median ratio. A run
// starts only below a load average limit (Config.MaxLoad) unless forced, and records
// the load before and after. Absolute times depend on the machine and its load; only
// ratios from one run mean anything. Nothing here asserts a speed.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/measure"
)

// Measurement names one of the measurements, for Config.Skip.
type Measurement string

// The measurements, in the order Run makes them.
const (
	MUncontended Measurement = "uncontended"
	MContended   Measurement = "contended"
	MManyKeys    Measurement = "manykeys"
	MCrash       Measurement = "crash"
	MAllocs      Measurement = "allocs"
	MElection    Measurement = "election" // an election's failover after its leader crashed (election_multi.go)
	MMultiKey    Measurement = "multikey" // 4 keys at once against 4 single leases (election_multi.go)
	MScaling     Measurement = "scaling"  // hand-offs/s and store requests per hand-off with 8, 32, 100 waiters (scaling.go)
)

// Measurements lists every Measurement.
var Measurements = []Measurement{MUncontended, MContended, MScaling, MManyKeys, MCrash, MAllocs, MElection, MMultiKey}

// Config says what Run measures and for how long. Zero fields take the defaults
// (DefaultConfig).
type Config struct {
	// Targets selects targets by name ("redis", "bsm/redislock") or by store with an
	// "@" ("@redis5"); empty selects all. An entry that selects nothing is an error.
	Targets []string
	// Skip leaves measurements out.
	Skip []Measurement
	// Duration is the length of each contended and many-keys measurement.
	Duration time.Duration
	// Clients is the number of clients contending for one key.
	Clients int
	// ManyClients and Keys size the many-keys measurement.
	ManyClients, Keys int
	// Rounds of the uncontended measurement (one cycle of each contender per round),
	// after Warmup rounds that are not counted.
	Rounds, Warmup int
	// AllocCycles is the number of cycles the allocation count is averaged over.
	AllocCycles int
	// CrashTrials is the number of vanished holders per target; CrashTimeout is their
	// lease TTL or session timeout.
	CrashTrials  int
	CrashTimeout time.Duration
	// TTL is the lease TTL (session timeout) of every other measurement.
	TTL time.Duration
	// Repeat is how many times the uncontended and contended measurements run (each
	// repetition across every target before the next); the rows show the repetition
	// with the median, and the checks use the median of the repetitions' ratios.
	Repeat int
	// Waiters are the numbers of clients of the scaling measurement, fewest first.
	Waiters []int
	// MaxLoad: the run waits up to QuietWait for the one-minute load average to drop
	// below MaxLoad, then refuses to run (ErrBusy) unless ForceAfterWait is set (it
	// then measures, the results marked not quiet). Force measures at once.
	MaxLoad        float64
	QuietWait      time.Duration
	Force          bool
	ForceAfterWait bool
}

// DefaultConfig is the configuration of `dlock-lab bench` without flags.
var DefaultConfig = Config{
	Duration: 3 * time.Second, Clients: 8, ManyClients: 64, Keys: 1000,
	Rounds: 1000, Warmup: 20, AllocCycles: 200,
	CrashTrials: 3, CrashTimeout: 2 * time.Second, TTL: 10 * time.Second,
	Repeat: 3, Waiters: DefaultWaiters, MaxLoad: DefaultMaxLoad, QuietWait: 3 * time.Minute,
}

func (c Config) withDefaults() Config {
	d := DefaultConfig
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setD := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setD(&c.Duration, d.Duration)
	set(&c.Clients, d.Clients)
	set(&c.ManyClients, d.ManyClients)
	set(&c.Keys, d.Keys)
	set(&c.Rounds, d.Rounds)
	if c.Warmup < 0 {
		c.Warmup = 0
	} else if c.Warmup == 0 {
		c.Warmup = d.Warmup
	}
	set(&c.AllocCycles, d.AllocCycles)
	set(&c.CrashTrials, d.CrashTrials)
	setD(&c.CrashTimeout, d.CrashTimeout)
	setD(&c.TTL, d.TTL)
	set(&c.Repeat, d.Repeat)
	if len(c.Waiters) == 0 {
		c.Waiters = d.Waiters
	}
	if c.MaxLoad <= 0 {
		c.MaxLoad = d.MaxLoad
	}
	if c.QuietWait < 0 {
		c.QuietWait = 0
	} else if c.QuietWait == 0 {
		c.QuietWait = d.QuietWait
	}
	return c
}

func (c Config) skips(m Measurement) bool { return slices.Contains(c.Skip, m) }

// Select returns the targets cfg.Targets names, in report order, or an error naming
// an entry that selects nothing.
func Select(names []string) ([]Target, error) {
	all := Targets()
	if len(names) == 0 {
		return all, nil
	}
	picked := map[string]bool{}
	for _, n := range names {
		found := false
		for _, t := range all {
			if t.Name == n || "@"+string(t.Store) == n {
				picked[t.Name], found = true, true
			}
		}
		if !found {
			return nil, fmt.Errorf("bench: no target %q (targets: %s; stores: %s)", n, strings.Join(targetNames(all), ", "), strings.Join(storeNames(all), ", "))
		}
	}
	var out []Target
	for _, t := range all {
		if picked[t.Name] {
			out = append(out, t)
		}
	}
	return out, nil
}

func targetNames(ts []Target) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func storeNames(ts []Target) []string {
	var out []string
	for _, t := range ts {
		if s := "@" + string(t.Store); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Results is the outcome of one Run.
type Results struct {
	Started time.Time
	Elapsed time.Duration
	Machine Machine
	Config  Config
	// Command, when the caller sets it, is printed as the way to reproduce the run.
	Command string `json:",omitempty"`
	// Rows holds one row per target, and one per raw baseline (Kind Raw) before the
	// targets it is compared with.
	Rows   []Row
	Checks []Check
	// Load is the load average before and after the run, and the limit it started
	// under (or that it was forced past).
	Load Load
}

// Machine describes where the run happened.
type Machine struct {
	CPUs       int
	CPU        string
	GoVersion  string
	OS, Arch   string
	LoadBefore string // /proc/loadavg when the measurements started
	LoadAfter  string // and when they ended
}

// Row is the measurements of one target (or raw baseline). A measurement that was
// skipped, not applicable, or failed is nil; failures are in Errors.
type Row struct {
	Name     string
	Kind     Kind
	Store    Store
	Baseline string `json:",omitempty"`

	Uncontended *measure.Latency    `json:",omitempty"`
	RawRatio    float64             `json:",omitempty"` // Uncontended p50 / the baseline's p50
	Contended   *Contention         `json:",omitempty"`
	ManyKeys    *measure.Throughput `json:",omitempty"`
	Crash       *Crash              `json:",omitempty"`
	Allocs      *Allocs             `json:",omitempty"`
	Election    *Crash              `json:",omitempty"` // the crash measurement on an election's candidates
	MultiKey    *MultiKey           `json:",omitempty"`
	Primitives  *Primitives         `json:",omitempty"` // semaphores and read-write locks (primitives.go)
	Scaling     *Scaling            `json:",omitempty"` // contended with Config.Waiters clients (scaling.go)
	PrimScaling []PrimScale         `json:",omitempty"` // the same on semaphores, read-write locks, elections (primscaling.go)
	// Repeats holds each repetition's figures (Config.Repeat): Uncontended and
	// Contended above are the repetition with the median.
	Repeats *Repeats `json:",omitempty"`

	// Skipped says why nothing was measured (a server that could not be started).
	Skipped string   `json:",omitempty"`
	Errors  []string `json:",omitempty"`
}

// Repeats are one row's figures in each repetition, in order.
type Repeats struct {
	P50          []time.Duration `json:",omitempty"` // uncontended p50
	RawRatio     []float64       `json:",omitempty"` // uncontended p50 / the baseline's in the same repetition
	TransferRate []float64       `json:",omitempty"` // contended hand-offs/s
	MaxOverMean  []float64       `json:",omitempty"` // contended longest wait / mean wait
	MaxRounds    []float64       `json:",omitempty"` // contended longest wait in rounds of the other clients (Contention.MaxRounds)
}

// Crash is the outcome of the vanished-holder measurement.
type Crash struct {
	Timeout string          // what frees the lock: "TTL 2s", "session timeout 2s", …
	Trials  []time.Duration // time from the cut to the waiter's grant, per trial
	P50     time.Duration
	Max     time.Duration
}

// Allocs is the heap allocation count per acquire+release cycle.
type Allocs struct {
	PerCycle      float64
	BytesPerCycle float64
}

// Row returns the row named name, or nil.
func (r *Results) Row(name string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Name == name {
			return &r.Rows[i]
		}
	}
	return nil
}

// JSON returns the results as indented JSON (durations in nanoseconds).
func (r *Results) JSON() ([]byte, error) {
	return json.MarshalIndent(r, "", "  ")
}

// Run starts the servers the selected targets need, measures every target and
// returns the results. progress, if not nil, receives a line per step. A target whose
// server cannot be started is reported as skipped (Row.Skipped), and a measurement
// that fails is recorded in its row (Row.Errors); neither stops the run. Run returns
// an error for a bad Config, and ctx's error (with the results so far) when ctx ends.
//
// Run uses the process-wide shared servers of package servers (and the addresses in
// its environment variables); the caller stops them with servers.Shutdown. It turns
// the MySQL driver's logging off for the whole process. The five
// Redis masters and the MySQL and PostgreSQL databases Run creates are removed
// before it returns.
func Run(ctx context.Context, cfg Config, progress func(string)) (*Results, error) {
	cfg = cfg.withDefaults()
	targets, err := Select(cfg.Targets)
	if err != nil {
		return nil, err
	}
	for _, m := range cfg.Skip {
		if !slices.Contains(Measurements, m) {
			return nil, fmt.Errorf("bench: no measurement %q (measurements: %v)", m, Measurements)
		}
	}
	if progress == nil {
		progress = func(string) {}
	}
	// The crash measurement breaks connections on purpose: the MySQL driver would log
	// every one of them.
	_ = mysql.SetLogger(&mysql.NopLogger{})
	res := &Results{Started: time.Now(), Config: cfg, Machine: machine()}
	var stores []Store
	for _, t := range targets {
		if !slices.Contains(stores, t.Store) {
			stores = append(stores, t.Store)
		}
	}
	load, err := waitQuiet(ctx, cfg.MaxLoad, cfg.QuietWait, cfg.Force, cfg.ForceAfterWait, progress)
	res.Load = load
	res.Machine.LoadBefore = load.Before
	if err != nil {
		return res, err
	}
	progress(fmt.Sprintf("starting servers: %v", stores))
	e := newEnv()
	e.start(ctx, stores...)
	defer e.close()
	err = measureAll(ctx, e, cfg, targets, res, progress)
	res.Checks = checks(res)
	res.Elapsed = time.Since(res.Started)
	res.Machine.LoadAfter = loadavg()
	res.Load.After = res.Machine.LoadAfter
	progress(fmt.Sprintf("load average %s before, %s after", res.Load.Before, res.Load.After))
	return res, err
}

// measureAll fills res with rows for targets, measuring on e.
func measureAll(ctx context.Context, e *env, cfg Config, targets []Target, res *Results, progress func(string)) error {
	bases := map[string]baseline{}
	for _, b := range baselines() {
		bases[b.Name] = b
	}
	rows := map[string]*Row{}
	var order []string
	add := func(r Row) {
		order = append(order, r.Name)
		rows[r.Name] = &r
	}
	for _, t := range targets {
		if t.Baseline != "" && rows[t.Baseline] == nil {
			b := bases[t.Baseline]
			add(Row{Name: b.Name, Kind: Raw, Store: b.Store})
		}
		add(Row{Name: t.Name, Kind: t.Kind, Store: t.Store, Baseline: t.Baseline})
	}
	defer func() {
		res.Rows = res.Rows[:0]
		for _, n := range order {
			res.Rows = append(res.Rows, *rows[n])
		}
	}()
	fail := func(r *Row, m Measurement, err error) {
		r.Errors = append(r.Errors, fmt.Sprintf("%s: %v", m, err))
		progress(fmt.Sprintf("%-20s %s FAILED: %v", r.Name, m, err))
	}
	for _, n := range order {
		r := rows[n]
		if err := e.missing[r.Store]; err != nil {
			r.Skipped = fmt.Sprintf("%s server not available: %v", r.Store, err)
			progress(fmt.Sprintf("%-20s skipped: %s", r.Name, r.Skipped))
		}
	}
	live := func(ts []Target) []Target {
		var out []Target
		for _, t := range ts {
			if rows[t.Name].Skipped == "" {
				out = append(out, t)
			}
		}
		return out
	}
	targets = live(targets)

	reps := func(r *Row) *Repeats {
		if r.Repeats == nil {
			r.Repeats = &Repeats{}
		}
		return r.Repeats
	}
	if !cfg.skips(MUncontended) {
		// One interleaved group per baseline (targets without one run alone).
		var groups [][]Target
		idx := map[string]int{}
		for _, t := range targets {
			g, ok := idx[t.Baseline]
			if !ok || t.Baseline == "" {
				g = len(groups)
				idx[t.Baseline] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], t)
		}
		lats := map[string][]measure.Latency{} // per row, one per repetition
		failed := map[string]bool{}            // rows whose measurement failed: not asked again
		for rep := range cfg.Repeat {
			for _, g := range groups {
				var base *baseline
				if b, ok := bases[g[0].Baseline]; ok {
					base = &b
				}
				if base != nil && failed[base.Name] {
					continue
				}
				g = slices.DeleteFunc(slices.Clone(g), func(t Target) bool { return failed[t.Name] })
				if len(g) == 0 {
					continue
				}
				progress(fmt.Sprintf("uncontended (%d/%d): %s", rep+1, cfg.Repeat, strings.Join(targetNames(g), ", ")))
				raw, ls, errs, err := uncontended(ctx, e.ep, base, g, cfg.TTL, cfg.Warmup, cfg.Rounds)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil && base != nil {
					fail(rows[base.Name], MUncontended, err)
					failed[base.Name] = true
					for _, t := range g {
						fail(rows[t.Name], MUncontended, fmt.Errorf("baseline failed"))
						failed[t.Name] = true
					}
					continue
				}
				if base != nil {
					lats[base.Name] = append(lats[base.Name], raw)
					reps(rows[base.Name]).P50 = append(reps(rows[base.Name]).P50, raw.P50)
				}
				for i, t := range g {
					r := rows[t.Name]
					if errs[i] != nil {
						fail(r, MUncontended, errs[i])
						failed[t.Name] = true
						continue
					}
					lats[t.Name] = append(lats[t.Name], ls[i])
					reps(r).P50 = append(reps(r).P50, ls[i].P50)
					if base != nil && raw.P50 > 0 {
						reps(r).RawRatio = append(reps(r).RawRatio, float64(ls[i].P50)/float64(raw.P50))
					}
				}
			}
		}
		// Each row shows its median repetition: by the ratio to its baseline where
		// it has one, else by p50.
		for _, n := range order {
			r, ls := rows[n], lats[n]
			if len(ls) == 0 || failed[n] {
				continue
			}
			i := medianIndex(len(ls), func(i int) float64 { return float64(ls[i].P50) })
			if rr := r.Repeats.RawRatio; len(rr) == len(ls) {
				i = medianIndex(len(rr), func(i int) float64 { return rr[i] })
				r.RawRatio = rr[i]
			}
			r.Uncontended = &ls[i]
			if r.RawRatio > 0 {
				progress(fmt.Sprintf("%-20s uncontended %v (%.2f× raw, median of %d)", n, ls[i], r.RawRatio, len(ls)))
			} else {
				progress(fmt.Sprintf("%-20s uncontended %v (median of %d)", n, ls[i], len(ls)))
			}
		}
	}
	if !cfg.skips(MContended) {
		cs := map[string][]Contention{}
		for rep := range cfg.Repeat {
			for _, t := range targets {
				r := rows[t.Name]
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if rep > 0 && len(cs[t.Name]) < rep {
					continue // failed in an earlier repetition
				}
				mctx, cancel := context.WithTimeout(ctx, 3*cfg.Duration+2*time.Minute)
				c, err := contended(mctx, e.ep, t, cfg.TTL, cfg.Clients, cfg.Duration)
				cancel()
				if err != nil {
					fail(r, MContended, err)
					continue
				}
				cs[t.Name] = append(cs[t.Name], c)
				reps(r).TransferRate = append(reps(r).TransferRate, c.TransferRate)
				reps(r).MaxOverMean = append(reps(r).MaxOverMean, c.MaxOverMean())
				reps(r).MaxRounds = append(reps(r).MaxRounds, c.MaxRounds())
				progress(fmt.Sprintf("%-20s contended (%d/%d) %s", t.Name, rep+1, cfg.Repeat, c))
			}
		}
		for _, t := range targets {
			if c := cs[t.Name]; len(c) == cfg.Repeat {
				i := medianIndex(len(c), func(i int) float64 { return c[i].TransferRate })
				rows[t.Name].Contended = &c[i]
			}
		}
	}
	for _, t := range targets {
		r := rows[t.Name]
		step := func(m Measurement, f func(ctx context.Context) (string, error)) {
			if cfg.skips(m) || ctx.Err() != nil {
				return
			}
			mctx, cancel := context.WithTimeout(ctx, 3*cfg.Duration+time.Duration(cfg.CrashTrials)*(3*cfg.CrashTimeout+20*time.Second)+2*time.Minute)
			defer cancel()
			s, err := f(mctx)
			if err != nil {
				fail(r, m, err)
				return
			}
			progress(fmt.Sprintf("%-20s %s %s", t.Name, m, s))
		}
		step(MScaling, func(ctx context.Context) (string, error) {
			sc, err := repeatScaling(cfg.Repeat, func() (*Scaling, error) {
				return scaling(ctx, e, t, cfg.TTL, cfg.Waiters, cfg.Duration)
			})
			if err == nil {
				r.Scaling = sc
			}
			return sc.String(), err
		})
		step(MManyKeys, func(ctx context.Context) (string, error) {
			tp, err := manyKeys(ctx, e.ep, t, cfg.TTL, cfg.ManyClients, cfg.Keys, cfg.Duration)
			if err == nil {
				r.ManyKeys = &tp
			}
			return tp.String(), err
		})
		if t.CrashNote != nil {
			step(MCrash, func(ctx context.Context) (string, error) {
				c, err := crash(ctx, e, t, cfg.CrashTimeout, cfg.CrashTrials)
				if err == nil {
					r.Crash = &c
				}
				return fmt.Sprintf("p50 %v max %v (%s)", c.P50, c.Max, c.Timeout), err
			})
		}
		step(MAllocs, func(ctx context.Context) (string, error) {
			a, err := allocs(ctx, e.ep, t, cfg.TTL, 10, cfg.AllocCycles)
			if err == nil {
				r.Allocs = &a
			}
			return fmt.Sprintf("%.1f allocs, %.0f B per cycle", a.PerCycle, a.BytesPerCycle), err
		})
		if t.CrashNote != nil && t.Kind == Backend && !cfg.skips(MElection) && ctx.Err() == nil {
			if ok, err := hasElection(ctx, e.ep, t, cfg.TTL); err != nil {
				fail(r, MElection, err)
			} else if ok {
				step(MElection, func(ctx context.Context) (string, error) {
					c, err := electionFailover(ctx, e, t, cfg.CrashTimeout, cfg.CrashTrials)
					if err == nil {
						r.Election = &c
					}
					return fmt.Sprintf("leader replaced p50 %v max %v (%s)", c.P50, c.Max, c.Timeout), err
				})
			}
		}
		if t.Kind == Backend {
			step(MMultiKey, func(ctx context.Context) (string, error) {
				m, err := multiKey(ctx, e.ep, t, cfg.TTL, cfg.Warmup, cfg.Rounds/4)
				if err == nil {
					r.MultiKey = &m
				}
				return fmt.Sprintf("%d keys at once p50 %v, %d single leases p50 %v (%.2f×)", setSize, m.Set.P50, setSize, m.Singles.P50, m.Ratio), err
			})
			step(MPrimScaling, func(ctx context.Context) (string, error) {
				ps, err := primScaling(ctx, e, t, cfg.TTL, primWaiters(cfg.Waiters), cfg.Duration, cfg.Repeat)
				r.PrimScaling = ps
				if errors.Is(err, errors.ErrUnsupported) {
					return "no primitives", nil
				}
				return primScalingString(ps), err
			})
			step(MPrimitives, func(ctx context.Context) (string, error) {
				p, err := primitives(ctx, e.ep, t, cfg.TTL, cfg.Warmup, cfg.Rounds/4, cfg.Duration)
				r.Primitives = p
				if errors.Is(err, errors.ErrUnsupported) {
					return "no primitives", nil
				}
				return p.String(), err
			})
		}
		if b, ok := bases[t.Baseline]; ok && rows[b.Name].Allocs == nil && !cfg.skips(MAllocs) && ctx.Err() == nil {
			a, err := rawAllocs(ctx, e.ep, b, 10, cfg.AllocCycles)
			if err != nil {
				fail(rows[b.Name], MAllocs, err)
			} else {
				rows[b.Name].Allocs = &a
			}
		}
	}
	return ctx.Err()
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// medianIndex returns the index of the median of n values (the lower one of the two
// middle values when n is even).
func medianIndex(n int, v func(int) float64) int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(v(a), v(b)) })
	return idx[(n-1)/2]
}

// median is the median of vs (the lower middle value when there are an even number),
// 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	return vs[medianIndex(len(vs), func(i int) float64 { return vs[i] })]
}
