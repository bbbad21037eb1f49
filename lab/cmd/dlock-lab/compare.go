package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/cmdline"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/lab/bench"
	"github.com/dlock-go/dlock/spec"
)

func init() {
	register(&command{
		Name:     "compare",
		Summary:  "run the conformance suite, the fault campaign and the benchmarks; write the report",
		Synopsis: "dlock-lab compare [--backends a,b] [--scenarios s,t] [--trials N] [--duration D] [--out DIR] | dlock-lab compare --from DIR [--out DIR]",
		Help:     strings.Replace(compareHelp, "SCENARIOS", wrap(strings.Join(allScenarios(), ", "), 80, "  "), 1),
		Footer:   compareFooter,
		Flags:    compareFlags,
		Run:      compareCommand,
	})
}

const compareHelp = `
Put every backend and peer side by side, on real servers, under real faults:

  1. the conformance suite (mutual exclusion, deadlock freedom, owner-only release,
     expiry, fencing, ...) for each backend: scenario "Conformance";
  2. the fault campaign: holder crash (SIGKILL) and pause (SIGSTOP), server restart,
     replica failover, network partition, quorum loss, leader kill, clock jump;
  3. the benchmarks (latency, contended hand-offs per second, cost with 8, 32 and
     100 waiters, the speed targets): scenario "Bench". They start only once the
     machine is quiet (one-minute load average below --max-load, waited for up to
     3 minutes; after that, or at once with --force, they run anyway and the report
     says they are not quiet — the project commits only quiet reports).

Steps 1 and 2 run the project's own test packages ("go test -json -run
'TestConformance|TestFaults'"), so dlock-lab compare needs a source checkout of dlock and
the Go toolchain: run it from anywhere inside the checkout. Each test package starts
the servers it needs itself (redis-server, MariaDB, ZooKeeper, PostgreSQL from "make
deps"; etcd as member processes of the lab's own binary) on free loopback ports, and stops them. A backend whose server is not
installed is skipped (its cells read "not applicable"), unless DLOCK_REQUIRE_SERVERS=1.

While it works it shows progress (a bar on a terminal, plain lines otherwise). At the
end it prints the guarantee matrices (backend x property, backend x fault scenario)
and the speed table, and writes into --out:
  report.json   everything, machine-readable
  report.md     the matrices, the speed table, the evidence of every violation
  report.html   one self-contained page with charts (open it in any browser)
  cells/        the raw JSON cell files of each test package; logs/: go test output

Every cell is checked against what the backend declares (its Capabilities): a
declared weakness must reproduce, a guarantee must hold. A cell that differs is a
surprise: it fails its test and dlock-lab compare exits 1.

--from DIR renders a report from what an earlier run left in DIR (a report.json, or
conformance-*.json / faults-*.json cell files) without running anything.

Backends (--backends, comma-separated; default all):
  mem, redis (SET NX PX, also redis+setnx and Redis Cluster), redlock,
  mysql (also mysql+getlock), zk, etcd,
  peer+bsm, peer+redsync, peer+etcd, peer+zk, peer+getlock, peer+pgadvisory
  (libraries and lock code people use today)
  "backends" and "peers" name the two groups.

Scenarios (--scenarios, comma-separated; default all):
  SCENARIOS
  A fault scenario runs on the primitives too (their Semaphore…, RW… and
  Election… mirrors); a mirror may also be chosen alone (ElectionPartition).

Two campaigns, one report format. The quick one (the default) runs every backend,
peer and scenario with 2 exercised trials a fault scenario, one trial a property and
one benchmark repetition of 1s measurements: a first look, labelled quick. The full
one (--full) is what a committed report is made of: 20 exercised trials of every
fault cell (a trial whose fault did not take effect does not count: up to 3 times as
many run), 20 trials of the timing-dependent properties, the benchmarks repeated 3
times. Both run three test packages at once (--parallel), the longest first; the
benchmarks run alone, once the tests are done. Every cell records the commit and a
hash of the code it tested.

Examples:
  dlock-lab compare                                  everything, quick
  dlock-lab compare --full                           everything, the committed kind
  dlock-lab compare --backends redis,etcd --trials 10
  dlock-lab compare --backends mem --scenarios Conformance --out /tmp/r
  dlock-lab compare --from report --out report       re-render an earlier run
`

const compareFooter = `
Exit codes:
  0   every test passed and every cell is what its backend declares
  1   a test failed or a cell surprised (see the summary and logs/ in --out)
  64  usage error: bad flags, unknown backend or scenario, not inside a dlock checkout
  69  the Go toolchain is missing
  70  the report could not be written`

// compareConfig holds the parsed flags of "dlock-lab compare".
type compareConfig struct {
	backends, scenarios string
	trials              int
	duration            time.Duration
	out, from, replace  string
	because             string
	maxLoad             float64
	force               bool
	full                bool
	parallel            int
}

// The two campaigns. The quick one (the default) runs every backend, peer and
// scenario with few trials, in minutes; the full one (--full) is what a committed
// report is made of: 20 exercised trials of every fault cell, 20 trials of the
// timing-dependent properties, the benchmarks with their repetitions.
const (
	quickTrials, fullTrials                 = 2, 20
	quickPropertyTrials, fullPropertyTrials = 1, 20
	quickRepeat                             = 1
	quickDuration                           = time.Second
	// defaultParallel test packages run at once, in both campaigns. Each package
	// starts its own servers on free ports; a verdict must not depend on the
	// machine's load (docs/evidence.md). One at a time, the full campaign's
	// packages would take about five hours.
	defaultParallel = 3
)

var compareCfg compareConfig

func compareFlags(fs *flag.FlagSet) {
	compareCfg = compareConfig{}
	c := &compareCfg
	fs.StringVar(&c.backends, "backends", "all", "comma-separated `list` of backends and peers (see above)")
	fs.StringVar(&c.scenarios, "scenarios", "all", "comma-separated `list` of scenarios: Conformance, fault scenarios, Bench")
	fs.BoolVar(&c.full, "full", false, "the full campaign: 20 exercised trials of every fault scenario and of the timing-dependent properties, the benchmarks repeated 3 times (default: the quick one, 2 trials, 1 repetition)")
	fs.IntVar(&c.trials, "trials", 0, "exercised trials per fault scenario (default 2, or 20 with --full)")
	fs.DurationVar(&c.duration, "duration", 0, "how long each benchmark measurement runs (default 1s; with --full the benchmarks' own)")
	fs.IntVar(&c.parallel, "parallel", 0, "how many test packages run at once (default 3); the benchmarks always run alone")
	fs.StringVar(&c.out, "out", "report", "`directory` for report.json, report.md, report.html")
	fs.Float64Var(&c.maxLoad, "max-load", bench.DefaultMaxLoad, "the benchmarks wait (up to 3 minutes) for the one-minute load average to drop below this; then they run, marked not quiet")
	fs.BoolVar(&c.force, "force", false, "run the benchmarks at once even above --max-load (the report says they are not quiet)")
	fs.StringVar(&c.from, "from", "", "render the report from the JSON files in `DIR` without running anything")
	fs.StringVar(&c.replace, "replace", "", "with --from: the report of a second run in `DIR` (--backends of the same campaign) whose test packages' cells, failures, histories and logs (and speed table, if it ran the benchmarks) replace the first run's (copied into --out); the report notes it")
	fs.StringVar(&c.because, "because", "", "with --replace: why the packages were run again (a `reason` for the report's note)")
}

// target is one test package that compare runs.
type target struct {
	Name  string   // what --backends calls it; also the label of its cells
	Dir   string   // its module's directory, relative to the repository's root
	Pkg   string   // the package, relative to its module's directory
	Group string   // "backends" or "peers"
	Bench []string // its targets in internal/bench
	// Minutes is about how long its package's tests take in the full campaign
	// alone on two cores (2026-12-05, from the quick run's durations): the
	// longest start first, so that the run is not left waiting on one package.
	Minutes int
}

var targets = []target{
	{"mem", ".", "./backends/memlock", "backends", []string{"mem"}, 1},
	{"redis", ".", "./backends/redislock", "backends", []string{"redis", "redis fifo", "redis+setnx/getset", "redis+setnx/expire"}, 32},
	{"redlock", ".", "./backends/redlock", "backends", []string{"redlock(5)"}, 12},
	{"mysql", ".", "./backends/mysqllock", "backends", []string{"mysql", "mysql fifo", "mysql+getlock"}, 36},
	{"zk", ".", "./backends/zklock", "backends", []string{"zk"}, 52},
	{"etcd", ".", "./backends/etcdlock", "backends", []string{"etcd"}, 35},
	{"postgres", ".", "./backends/pglock", "backends", []string{"postgres", "postgres fifo", "postgres+advisory"}, 68},
	{"peer+bsm", "lab", "./peers/bsmpeer", "peers", []string{"bsm/redislock"}, 7},
	{"peer+redsync", "lab", "./peers/redsyncpeer", "peers", []string{"redsync", "redsync(5)"}, 7},
	{"peer+etcd", "lab", "./peers/etcdpeer", "peers", []string{"etcd-mutex"}, 17},
	{"peer+zk", "lab", "./peers/zkpeer", "peers", []string{"zk.Lock"}, 9},
	{"peer+getlock", "lab", "./peers/getlockpeer", "peers", []string{"mysql GET_LOCK"}, 2},
	{"peer+pgadvisory", "lab", "./peers/pgadvisorypeer", "peers", []string{"pg_advisory_lock"}, 12},
}

// Scenario names of --scenarios besides the fault scenarios.
const (
	scenarioConformance = "Conformance"
	scenarioBench       = "Bench"
)

// compareCommand is "dlock-lab compare".
func compareCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("compare")
	c := compareCfg
	if fs.NArg() > 0 {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if c.out == "" {
		return cmd.UsageError(os.Stderr, "--out must not be empty")
	}
	if c.from != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, n := range []string{"backends", "scenarios", "trials", "duration", "max-load", "force", "parallel"} {
			if set[n] {
				return cmd.UsageError(os.Stderr, "--from renders an earlier run; it cannot be combined with --"+n)
			}
		}
		r, err := report.FromDir(c.from)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dlock-lab compare: %v\n", err)
			return cmdline.ExitUsage
		}
		if c.replace != "" {
			if c.because == "" {
				return cmd.UsageError(os.Stderr, "--replace needs --because: the report says why packages were run again")
			}
			again, err := report.FromDir(c.replace)
			if err == nil {
				r, _, err = replacePackages(r, again, c.because)
			}
			if err == nil {
				err = copyRun(c.replace, c.out)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "dlock-lab compare: --replace %s: %v\n", c.replace, err)
				return cmdline.ExitUsage
			}
		}
		return finishReport(r, c.out)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["replace"] || set["because"] {
		return cmd.UsageError(os.Stderr, "--replace and --because go with --from: they put a second run's packages into an earlier report")
	}
	if set["trials"] && c.trials < 1 {
		return cmd.UsageError(os.Stderr, "--trials must be at least 1")
	}
	if set["parallel"] && c.parallel < 1 {
		return cmd.UsageError(os.Stderr, "--parallel must be at least 1")
	}
	campaign, propertyTrials, repeat := "quick", quickPropertyTrials, quickRepeat
	if c.full {
		campaign, propertyTrials, repeat = "full", fullPropertyTrials, 0
	}
	if c.trials == 0 {
		c.trials = quickTrials
		if c.full {
			c.trials = fullTrials
		}
	}
	if c.parallel == 0 {
		c.parallel = defaultParallel
	}
	if c.duration == 0 && !c.full {
		c.duration = quickDuration
	}
	if c.duration < 0 {
		return cmd.UsageError(os.Stderr, "--duration must not be negative")
	}
	if c.maxLoad <= 0 {
		return cmd.UsageError(os.Stderr, "--max-load must be positive")
	}
	chosen, err := chooseTargets(c.backends)
	if err != nil {
		return cmd.UsageError(os.Stderr, "--backends: "+err.Error())
	}
	scen, err := chooseScenarios(c.scenarios)
	if err != nil {
		return cmd.UsageError(os.Stderr, "--scenarios: "+err.Error())
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab compare: %v\n", err)
		return cmdline.ExitUsage
	}
	if _, err := lookGo(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab compare: %v\n", err)
		return cmdline.ExitUnavailable
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &report.Report{Date: time.Now().Format(time.RFC3339), Machine: machine(),
		Command: "dlock-lab compare " + strings.Join(os.Args[2:], " "), Campaign: campaign}
	stamp, err := newStamper(root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab compare: %v\n", err)
		return cmdline.ExitUsage
	}
	if slices.ContainsFunc(scen, func(s string) bool { return s != scenarioConformance && s != scenarioBench }) {
		r.Trials = c.trials
	}
	pattern := runPattern(scen)
	steps := boolInt(slices.Contains(scen, scenarioBench))
	if pattern != "" {
		steps += len(chosen)
	}
	prog := newProgress(os.Stderr, steps)
	if pattern != "" {
		for _, res := range runTargets(ctx, chosen, c.parallel, func(t target) testResult {
			code, err := stamp.of(t)
			res := runTests(ctx, root, t, pattern, c.trials, propertyTrials, c.out, prog)
			if err != nil {
				res.failures = append([]string{t.Pkg + ": " + err.Error()}, res.failures...)
			}
			for i := range res.cells {
				res.cells[i].Code = code
			}
			prog.done()
			return res
		}) {
			r.Cells = append(r.Cells, res.cells...)
			r.Failures = append(r.Failures, res.failures...)
			r.Notes = append(r.Notes, res.notes...)
		}
	}
	if slices.Contains(scen, scenarioBench) && ctx.Err() == nil {
		speed, err := runBench(ctx, chosen, c.duration, c.trials, repeat, c.maxLoad, c.force, prog)
		if speed != nil {
			speed.Code, _ = stamp.bench()
		}
		if err != nil {
			r.Failures = append(r.Failures, "benchmarks: "+err.Error())
		}
		r.Speed = speed
		prog.done()
	}
	prog.finish()
	if ctx.Err() != nil {
		r.Notes = append(r.Notes, "interrupted: the report is incomplete")
	}
	code := finishReport(r, c.out)
	if code == cmdline.ExitOK && ctx.Err() != nil {
		return cmdline.ExitSignalBase + int(syscall.SIGINT)
	}
	return code
}

// runTargets runs test on each target, at most parallel at a time (test packages
// start their own servers on free ports, so they do not share anything), the
// longest (Minutes) first, and returns the results in the targets' order. After ctx ends no further target
// starts.
func runTargets(ctx context.Context, ts []target, parallel int, test func(target) testResult) []testResult {
	out := make([]testResult, len(ts))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	// The longest first (the table's order among equals).
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return ts[b].Minutes - ts[a].Minutes })
	for _, i := range order {
		t := ts[i]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = test(t)
		}()
	}
	wg.Wait()
	return out
}

// finishReport prints r's summary and writes its files into out.
func finishReport(r *report.Report, out string) int {
	r.WriteSummary(os.Stdout)
	paths, err := r.WriteFiles(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab compare: writing the report: %v\n", err)
		return cmdline.ExitSoftware
	}
	fmt.Fprintf(os.Stdout, "\nReport: %s\n", strings.Join(paths, ", "))
	if len(r.Failures) > 0 || len(r.Surprises()) > 0 {
		fmt.Fprintf(os.Stderr, "dlock-lab compare: %d failed test(s), %d surprising cell(s)\n", len(r.Failures), len(r.Surprises()))
		return 1
	}
	return cmdline.ExitOK
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// chooseTargets parses --backends.
func chooseTargets(list string) ([]target, error) {
	var out []target
	add := func(t target) {
		if !slices.ContainsFunc(out, func(o target) bool { return o.Name == t.Name }) {
			out = append(out, t)
		}
	}
	for _, name := range benchSplit(list) {
		found := false
		for _, t := range targets {
			if name == "all" || name == t.Group || name == t.Name {
				add(t)
				found = true
			}
		}
		if !found {
			var names []string
			for _, t := range targets {
				names = append(names, t.Name)
			}
			return nil, fmt.Errorf("unknown backend %q (known: all, backends, peers, %s)", name, strings.Join(names, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no backend chosen")
	}
	// Run in the table's order, whatever the order of the list.
	index := func(t target) int { return slices.IndexFunc(targets, func(o target) bool { return o.Name == t.Name }) }
	slices.SortStableFunc(out, func(a, b target) int { return index(a) - index(b) })
	return out, nil
}

// allScenarios lists the names --scenarios accepts, in order.
func allScenarios() []string {
	s := []string{scenarioConformance}
	for _, f := range spec.Scenarios {
		s = append(s, string(f))
	}
	return append(s, scenarioBench)
}

// chooseScenarios parses --scenarios (names are matched without regard to case):
// those of allScenarios, and a primitive's scenario alone (ElectionPartition).
func chooseScenarios(list string) ([]string, error) {
	known := allScenarios()
	for _, s := range spec.PrimitiveScenarios {
		known = append(known, string(s))
	}
	var out []string
	for _, name := range benchSplit(list) {
		if name == "all" {
			out = append(out, known...)
			continue
		}
		i := slices.IndexFunc(known, func(k string) bool { return strings.EqualFold(k, name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (known: all, %s)", name, strings.Join(known, ", "))
		}
		out = append(out, known[i])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenario chosen")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// runPattern returns the go test -run pattern for the chosen scenarios, or "" when
// no test is to run (only Bench). Subtest names of the suite are CamelCase; harness
// groups (TestFaults/single, TestConformanceSETNX/expire) start with a lower-case
// letter or a digit, and are always let through.
func runPattern(scen []string) string {
	conf := slices.Contains(scen, scenarioConformance)
	var faults []string
	for _, s := range spec.Scenarios {
		if slices.Contains(scen, string(s)) {
			faults = append(faults, string(s))
		}
	}
	for _, s := range spec.PrimitiveScenarios {
		// A scenario runs on the primitives too; a primitive's scenario may be
		// chosen alone.
		if slices.Contains(scen, string(spec.MutexScenarioOf(s))) || slices.Contains(scen, string(s)) {
			faults = append(faults, string(s))
		}
	}
	switch {
	case !conf && len(faults) == 0:
		return ""
	case conf && len(faults) == len(spec.Scenarios)+len(spec.PrimitiveScenarios):
		return "^(TestConformance.*|TestFaults)$"
	case len(faults) == 0:
		return "^TestConformance.*$"
	}
	top := "TestFaults"
	names := faults
	if conf {
		top = "TestConformance.*|TestFaults"
		for _, p := range slices.Concat(spec.Properties, spec.PrimitiveProperties) {
			names = append(names, string(p))
		}
	}
	level := "^(" + strings.Join(names, "|") + "|[a-z0-9].*)$"
	return "^(" + top + ")$/" + level + "/" + level
}

// moduleRoot finds the dlock source checkout containing the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			if mod := modulePath(string(data)); mod == "github.com/dlock-go/dlock" {
				return d, nil
			}
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("%s is not inside a dlock source checkout (no go.mod of module github.com/dlock-go/dlock above it): "+
				"dlock-lab compare runs the project's own tests; clone the repository and run it there", dir)
		}
		d = parent
	}
}

func modulePath(gomod string) string {
	for _, line := range strings.Split(gomod, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// machine describes this machine for the report header.
func machine() string {
	cpu := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = ", " + strings.TrimSpace(v)
				break
			}
		}
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s, %d CPUs%s, %s, host %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu, runtime.Version(), host)
}

// wrap breaks text at spaces into lines of at most width characters, every line but
// the first starting with indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := len(indent)
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = len(indent)
		} else if i > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
