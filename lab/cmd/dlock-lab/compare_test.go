package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/cmdline"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/lab/bench"
	"github.com/dlock-go/dlock/spec"
)

// TestCompareSubset runs the main job end to end on a tiny subset: the HolderCrash
// fault scenario on redis (one trial) and the benchmarks of mem and redis (short),
// then the conformance suite of mem, and checks the report files.
func TestCompareSubset(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runLong(t, 5*time.Minute, "", nil, "compare", "--backends", "mem,redis",
		"--scenarios", "HolderCrash,Bench", "--trials", "1", "--duration", "200ms", "--force", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	// Progress: plain lines (stderr is not a terminal here). The two packages run
	// at once (the quick campaign's --parallel), so either may start first; the
	// benchmarks start after both.
	for _, want := range []string{"/3] mem (", "/3] redis (", "compare: [3/3] benchmarks",
		"TestFaults/single/HolderCrash: pass", "compare: finished in"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
	}
	// The summary on stdout: the fault matrix and the speed table.
	for _, want := range []string{"Faults (backend × scenario", "Speed", "redis+setnx/getset", "report.html"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	r, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var crash *results.Cell
	for _, c := range r.Cells {
		if spec.MutexScenarioOf(spec.Scenario(c.Scenario)) != spec.HolderCrash { // the primitives' mirrors come along
			t.Errorf("cell of a scenario that was not chosen: %+v", c)
		}
		if c.Backend == "redis" && c.Scenario == string(spec.HolderCrash) {
			crash = &c
		}
	}
	if crash == nil || crash.Status != spec.Held || crash.Trials != 1 {
		t.Errorf("redis holder crash: %+v, want held in 1 trial", crash)
	}
	if r.Speed == nil || len(r.Speed.Latency) == 0 || len(r.Speed.Handoffs) == 0 {
		t.Fatalf("no speed numbers: %+v", r.Speed)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| redis | ✅ |", "## Speed", "| redis+setnx/getset |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	checkPage(t, filepath.Join(out, "report.html"))
	if logs, _ := filepath.Glob(filepath.Join(out, "logs", "*.log")); len(logs) != 2 {
		t.Errorf("logs: %v, want one per test package", logs)
	}

	// The conformance suite, on mem.
	out = t.TempDir()
	code, stdout, stderr = runLong(t, 5*time.Minute, "", nil, "compare", "--backends", "mem", "--scenarios", "conformance", "--out", out)
	if code != 0 || !strings.Contains(stdout, "Conformance (backend × property)") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if r, err = report.Read(filepath.Join(out, "report.json")); err != nil {
		t.Fatal(err)
	}
	mutex := 0 // mem's primitives (semaphores, read-write locks) add cells of their own
	for _, c := range r.Cells {
		if slices.Contains(spec.Properties, spec.Property(c.Property)) {
			mutex++
		}
	}
	if mutex != len(spec.Properties) || r.Speed != nil {
		t.Errorf("%d cells of the mutex's properties (want one per property) and speed %v (want none)", mutex, r.Speed)
	}
}

// TestCompareFrom renders the committed cells without running anything.
func TestCompareFrom(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runLong(t, time.Minute, "", nil, "compare", "--from", "testdata/cells", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, name := range []string{"report.json", "report.md", "report.html"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	r, err := report.Read(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cells) != 106 || r.Speed == nil {
		t.Errorf("%d cells and speed %v, want the 106 cells and the speed of testdata/cells", len(r.Cells), r.Speed != nil)
	}

	// A surprising cell makes compare --from exit 1 and name it.
	dir := t.TempDir()
	bad := results.Cell{Backend: "redis", Scenario: "Failover", Property: "MutualExclusion",
		Status: spec.Held, Expected: spec.Violated, Trials: 3}
	data, _ := json.Marshal(map[string]any{"cells": []results.Cell{bad}})
	if err := os.WriteFile(filepath.Join(dir, "faults-redis.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runLong(t, time.Minute, "", nil, "compare", "--from", dir, "--out", t.TempDir())
	if code != 1 || !strings.Contains(stdout, "!! redis, Failover / MutualExclusion: held, declared violated") {
		t.Errorf("a surprise: exit %d, want 1 and the cell named:\n%s", code, stdout)
	}
}

func TestCompareUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		dir  string
		want string
	}{
		{[]string{"--backends", "mongo"}, "", `unknown backend "mongo"`},
		{[]string{"--scenarios", "Meteor"}, "", `unknown scenario "Meteor"`},
		{[]string{"--trials", "0"}, "", "--trials must be at least 1"},
		{[]string{"--parallel", "0"}, "", "--parallel must be at least 1"},
		{[]string{"--from", "testdata/cells", "--parallel", "2"}, "", "cannot be combined with --parallel"},
		{[]string{"--from", "testdata/cells", "--backends", "mem"}, "", "cannot be combined with --backends"},
		{[]string{"--from", "testdata/nothing-here"}, "", "no report.json"},
		{[]string{"--replace", "testdata/cells", "--because", "x"}, "", "go with --from"},
		{[]string{"--from", "testdata/cells", "--replace", "testdata/cells"}, "", "--replace needs --because"},
		{[]string{"--bogus"}, "", "flag provided but not defined"},
		{[]string{"--backends", "mem"}, os.TempDir(), "not inside a dlock source checkout"},
	} {
		code, _, stderr := runLong(t, time.Minute, tc.dir, nil, append([]string{"compare"}, tc.args...)...)
		if code != cmdline.ExitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("compare %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, cmdline.ExitUsage, tc.want)
		}
	}
}

// TestRunPattern checks the go test -run patterns against subtest names as go test
// matches them: level by level, split at slashes.
func TestRunPattern(t *testing.T) {
	match := func(pattern, name string) bool {
		pats, names := strings.Split(pattern, "/"), strings.Split(name, "/")
		for i, n := range names {
			if i >= len(pats) {
				return true
			}
			if !mustMatch(t, pats[i], n) {
				return false
			}
		}
		return true
	}
	for _, tc := range []struct {
		scen    []string
		yes, no []string
	}{
		{[]string{"Conformance"}, []string{"TestConformance/Expiry", "TestConformanceSETNX/setnx+expire/Expiry"}, []string{"TestFaults/HolderCrash", "TestOpen"}},
		{[]string{"HolderCrash"}, []string{"TestFaults/HolderCrash", "TestFaults/single/HolderCrash", "TestFaults/table", "TestFaults/single/SemaphoreHolderCrash", "TestFaults/RWHolderCrash"},
			[]string{"TestFaults/Partition", "TestFaults/single/Partition", "TestConformance", "TestFaults/single/SemaphorePartition"}},
		{[]string{"Conformance", "Partition"}, []string{"TestConformance/Expiry", "TestConformanceSETNX/setnx+getset/MutualExclusion", "TestFaults/single/Partition",
			"TestConformance/SemaphoreBound", "TestConformance/WriterProgress", "TestFaults/single/RWPartition"},
			[]string{"TestFaults/single/HolderCrash", "TestFaults/ClockJump"}},
	} {
		p := runPattern(tc.scen)
		for _, n := range tc.yes {
			if !match(p, n) {
				t.Errorf("%v: pattern %q does not run %s", tc.scen, p, n)
			}
		}
		for _, n := range tc.no {
			if match(p, n) {
				t.Errorf("%v: pattern %q runs %s", tc.scen, p, n)
			}
		}
	}
	if p := runPattern([]string{"Bench"}); p != "" {
		t.Errorf("Bench alone runs tests: %q", p)
	}
}

// TestBenchTargetsExist: every bench target a compare target names is one that
// internal/bench knows (bench.Run refuses unknown names), and every bench target is
// named by one, so that the main job's speed table has every row `dlock-lab bench` has.
func TestBenchTargetsExist(t *testing.T) {
	var names, named []string
	for _, bt := range bench.Targets() {
		names = append(names, bt.Name)
	}
	for _, tg := range targets {
		for _, n := range tg.Bench {
			named = append(named, n)
			if !slices.Contains(names, n) {
				t.Errorf("%s: bench target %q unknown (known: %v)", tg.Name, n, names)
			}
		}
	}
	for _, n := range names {
		if !slices.Contains(named, n) {
			t.Errorf("bench target %q is measured by no compare target: dlock-lab compare leaves it out", n)
		}
	}
}

// TestTargetPackagesExist: every compare target's package is where go test will be
// run for it: its module's directory (the root's or the lab's) and the package in it.
func TestTargetPackagesExist(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		dir := filepath.Join(root, tg.Dir, tg.Pkg)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("%s: no package directory %s (%v)", tg.Name, dir, err)
		}
		if _, err := os.Stat(filepath.Join(root, tg.Dir, "go.mod")); err != nil {
			t.Errorf("%s: %s is no module's directory: %v", tg.Name, tg.Dir, err)
		}
	}
}

// TestRunTargets: the packages run at most parallel at a time, their results come
// back in the targets' order whatever order they finish in, and after the context
// ends no further package starts.
func TestRunTargets(t *testing.T) {
	ts := []target{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}, {Name: "e"}}
	for _, parallel := range []int{1, 2, 3} {
		var mu sync.Mutex
		running, most := 0, 0
		release := make(chan struct{})
		started := make(chan string, len(ts))
		done := make(chan []testResult)
		go func() {
			done <- runTargets(context.Background(), ts, parallel, func(tg target) testResult {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				started <- tg.Name
				<-release
				mu.Lock()
				running--
				mu.Unlock()
				return testResult{notes: []string{tg.Name}}
			})
		}()
		// Let the packages through one at a time, as each one starts: the pool
		// must have started `parallel` of them before the first may finish.
		next := func() {
			select {
			case <-started:
			case <-time.After(time.Minute):
				t.Fatalf("parallel %d: fewer packages started at once than allowed", parallel)
			}
		}
		for range parallel {
			next()
		}
		for range len(ts) - parallel {
			release <- struct{}{}
			next()
		}
		for range parallel {
			release <- struct{}{}
		}
		res := <-done
		if most != parallel {
			t.Errorf("parallel %d: at most %d ran at once", parallel, most)
		}
		var got []string
		for _, r := range res {
			got = append(got, r.notes...)
		}
		if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
			t.Errorf("parallel %d: results %v, want %v", parallel, got, want)
		}
	}

	// One at a time, the longest (Minutes) first, the table's order among equals.
	var started []string
	res := runTargets(context.Background(), []target{{Name: "a", Minutes: 1}, {Name: "b", Minutes: 9}, {Name: "c", Minutes: 1}, {Name: "d", Minutes: 5}}, 1,
		func(tg target) testResult {
			started = append(started, tg.Name)
			return testResult{notes: []string{tg.Name}}
		})
	if want := []string{"b", "d", "a", "c"}; !slices.Equal(started, want) {
		t.Errorf("started %v, want %v", started, want)
	}
	if res[0].notes[0] != "a" || res[3].notes[0] != "d" {
		t.Errorf("results %v, want them in the targets' order", res)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var ran []string
	runTargets(ctx, ts, 1, func(tg target) testResult {
		ran = append(ran, tg.Name)
		if tg.Name == "b" {
			cancel()
		}
		return testResult{}
	})
	if !slices.Equal(ran, []string{"a", "b"}) {
		t.Errorf("after cancel: ran %v, want a and b only", ran)
	}
}

// An interrupted compare leaves nothing running: the interrupt reaches the test
// binary (go test does not pass it on), which stops its servers. Every process the
// run starts carries a marker in its environment (a server may overwrite its own:
// redis-server sets its process title there, so servers are found as the children
// of marked processes); none may be left once compare has exited.
func TestCompareInterruptStopsServers(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if servers.RequireServers() {
			t.Fatal("redis-server not installed (make deps)")
		}
		t.Skip("redis-server not installed: make deps")
	}
	mark := fmt.Sprintf("DLOCK_INTERRUPT_MARK=%d", time.Now().UnixNano())
	cmd := exec.Command(labBin, "compare", "--backends", "redis", "--scenarios", "HolderCrash",
		"--trials", "20", "--out", t.TempDir())
	cmd.Env = append(os.Environ(), mark)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()    //nolint:errcheck // a no-op once it has exited
	go io.Copy(io.Discard, out) //nolint:errcheck // drain until it exits

	type process struct{ pid, ppid, cmdline string }
	procs := func() (all []process, marked map[string]bool) {
		marked = map[string]bool{}
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(f) < 2 || f[0] == "Z" {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
			all = append(all, process{d.Name(), f[1], strings.ReplaceAll(string(cmdline), "\x00", " ")})
			if env, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ")); err == nil &&
				slices.Contains(strings.Split(string(env), "\x00"), mark) {
				marked[d.Name()] = true
			}
		}
		return all, marked
	}
	// Interrupt it once a marked process (the test binary) has a redis-server child;
	// the run's processes then are the marked ones and their children.
	var run []process
	for deadline := time.Now().Add(3 * time.Minute); ; {
		all, marked := procs()
		run = run[:0]
		server := false
		for _, p := range all {
			if marked[p.pid] || marked[p.ppid] {
				run = append(run, p)
				server = server || marked[p.ppid] && strings.Contains(p.cmdline, "redis-server")
			}
		}
		if server {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no redis-server of the run within 3 minutes: %v", run)
		}
		time.Sleep(50 * time.Millisecond) // polling /proc: nothing signals a process start
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("compare still running 3 minutes after the interrupt")
	}
	all, marked := procs()
	var left []string
	for _, p := range all {
		if marked[p.pid] || slices.ContainsFunc(run, func(r process) bool { return r.pid == p.pid && r.cmdline == p.cmdline }) {
			left = append(left, p.pid+" "+p.cmdline)
			if pid, err := strconv.Atoi(p.pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("left running after the interrupted compare exited (now killed):\n%s", strings.Join(left, "\n"))
	}
}

// TestTestTimeout: go test's -timeout leaves every package of the full campaign room
// (a package that outlived it would lose all its cells to the timeout's panic).
func TestTestTimeout(t *testing.T) {
	for _, tg := range targets {
		if got, need := testTimeout(tg), 2*time.Duration(tg.Minutes)*time.Minute; got < need || got < time.Hour {
			t.Errorf("%s: timeout %v, want at least an hour and twice its %d minutes", tg.Name, got, tg.Minutes)
		}
	}
}
