package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
)

// testResult is what one test package contributed to the report.
type testResult struct {
	cells    []results.Cell
	failures []string
	notes    []string
}

// testEvent is one line of "go test -json" (see "go doc test2json").
type testEvent struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// lookGo finds the go command.
func lookGo() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the Go toolchain (the go command) is not on PATH: dlock-lab compare runs the project's tests with it; install Go (https://go.dev/dl/) or run `make compare`")
	}
	return p, nil
}

// testTimeout is go test's -timeout for t's package: a bound that only a hung test
// reaches, three times the full campaign's time for the package and never under an hour
// (the longest packages take more than an hour in the full campaign).
func testTimeout(t target) time.Duration {
	return max(time.Hour, 3*time.Duration(t.Minutes)*time.Minute)
}

// runTests runs the conformance and fault tests of t's package matching pattern,
// with the package's cell files written to <out>/cells/<name>/ and its go test
// output to <out>/logs/<name>.log, and returns the cells, the failed tests and notes.
func runTests(ctx context.Context, root string, t target, pattern string, trials, propertyTrials int, out string, prog *progress) testResult {
	var res testResult
	fail := func(format string, args ...any) testResult {
		res.failures = append(res.failures, t.Pkg+": "+fmt.Sprintf(format, args...))
		return res
	}
	cellDir, err := filepath.Abs(filepath.Join(out, "cells", fileName(t.Name)))
	if err != nil {
		return fail("%v", err)
	}
	logPath := filepath.Join(out, "logs", fileName(t.Name)+".log")
	for _, d := range []string{cellDir, filepath.Dir(logPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail("%v", err)
		}
	}
	// Cell files of an earlier run would be taken for this run's.
	if old, _ := report.CellFiles(cellDir); len(old) > 0 {
		for _, f := range old {
			_ = os.Remove(f)
		}
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail("%v", err)
	}
	defer logFile.Close()

	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-json", "-timeout", testTimeout(t).String(), "-run", pattern, t.Pkg)
	cmd.Dir = filepath.Join(root, t.Dir)
	cmd.Env = append(os.Environ(), results.DirEnv+"="+cellDir, "DLOCK_FAULT_TRIALS="+strconv.Itoa(trials),
		"DLOCK_PROPERTY_TRIALS="+strconv.Itoa(propertyTrials))
	// Interrupt go test and the test binary it runs (which stops its servers)
	// rather than kill them: go test does not pass a signal on to its test binary,
	// so both run in a process group of their own, and the interrupt goes to the
	// group. (A terminal's ^C reaches this command alone, which cancels ctx.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = time.Minute
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail("%v", err)
	}
	cmd.Stderr = logFile
	prog.start(t.Name)
	if err := cmd.Start(); err != nil {
		return fail("go test: %v", err)
	}
	failed, skipped, buildOutput := readEvents(stdout, logFile, t, prog)
	waitErr := cmd.Wait()

	res.failures = append(res.failures, leafFailures(t.Pkg, failed)...)
	if waitErr != nil && len(failed) == 0 {
		var ee *exec.ExitError
		msg := waitErr.Error()
		if errors.As(waitErr, &ee) {
			msg = "go test exited with " + ee.ProcessState.String()
		}
		if tail := lastLines(buildOutput, 8); tail != "" {
			msg += ": " + tail
		}
		res.failures = append(res.failures, fmt.Sprintf("%s: %s (see %s)", t.Pkg, msg, logPath))
	}
	if len(skipped) > 0 {
		res.notes = append(res.notes, fmt.Sprintf("%s: skipped %s (a server is missing? see %s)", t.Name, strings.Join(skipped, ", "), logPath))
	}
	files, err := report.CellFiles(cellDir)
	if err != nil {
		return fail("%v", err)
	}
	for _, f := range files {
		cells, err := report.ReadCells(f)
		if err != nil {
			return fail("%v", err)
		}
		for i := range cells { // the histories, from the report's directory
			cells[i].Histories = underDir(filepath.Join("cells", fileName(t.Name)), cells[i].Histories)
			cells[i].Visualizations = underDir(filepath.Join("cells", fileName(t.Name)), cells[i].Visualizations)
		}
		res.cells = append(res.cells, cells...)
	}
	return res
}

// underDir prefixes each of paths with dir.
func underDir(dir string, paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.ToSlash(filepath.Join(dir, p))
	}
	return out
}

// readEvents reads go test -json events, copies the tests' output into log, reports
// progress, and returns the failed and skipped top-level tests' names and the
// package-level output (build errors, panics outside a test).
func readEvents(r io.Reader, log io.Writer, t target, prog *progress) (failed, skipped []string, pkgOutput string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var pkgOut strings.Builder
	for sc.Scan() {
		var e testEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(log, sc.Text()) // not an event: pass it on
			continue
		}
		switch e.Action {
		case "output":
			io.WriteString(log, e.Output)
			if e.Test == "" {
				pkgOut.WriteString(e.Output)
			}
		case "run":
			prog.test(t.Name, e.Test)
		case "pass", "fail", "skip":
			if e.Test == "" {
				continue
			}
			prog.result(t.Name, e.Test, e.Action, time.Duration(e.Elapsed*float64(time.Second)))
			if e.Action == "fail" {
				failed = append(failed, e.Test)
			}
			if e.Action == "skip" && !strings.Contains(e.Test, "/") {
				skipped = append(skipped, e.Test)
			}
		}
	}
	return failed, skipped, pkgOut.String()
}

// leafFailures keeps the failed tests that have no failed subtest of their own: the
// ones that say what went wrong.
func leafFailures(pkg string, failed []string) []string {
	var out []string
	for _, f := range failed {
		if !slices.ContainsFunc(failed, func(g string) bool { return strings.HasPrefix(g, f+"/") }) {
			out = append(out, strings.TrimPrefix(pkg, "./")+": "+f)
		}
	}
	return out
}

func fileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}
