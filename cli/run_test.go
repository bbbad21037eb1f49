package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"help", "run"}, {"run", "--help"}, {"run", "-h"}} {
		p := startDlock(t, args...)
		var out strings.Builder
		for l := range p.out {
			out.WriteString(l + "\n")
		}
		p.waitCode(t, 0)
		text := out.String()
		if args[len(args)-1] == "help" || args[0] == "--help" {
			for _, want := range []string{"Commands:", "run ", "check ", "elect ", "leader ", "mem", "redis"} {
				if !strings.Contains(text, want) {
					t.Errorf("dlock %v: no %q in:\n%s", args, want, text)
				}
			}
			// The lab's commands and the peers' schemes are dlock-lab's, not the user's.
			for _, lab := range []string{"compare ", "bench ", "soak ", "docs ", "peer+"} {
				if strings.Contains(text, lab) {
					t.Errorf("dlock %v lists %q (the lab's) in:\n%s", args, lab, text)
				}
			}
			continue
		}
		for _, want := range []string{"Usage: dlock run", "-url URL", "-wait", "DLOCK_TOKEN", "Exit codes:", "75", "76", "79", "124", "-at-least", "-at-most", "-skip-if-held"} {
			if !strings.Contains(text, want) {
				t.Errorf("dlock %v: no %q in:\n%s", args, want, text)
			}
		}
	}
}

// TestUsageErrors: every kind of bad invocation exits 64 with a message that names
// what was wrong.
func TestUsageErrors(t *testing.T) {
	cmd := []string{"--", childBin, "exit", "0"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Commands:"},
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{append([]string{"run", "--key", "k"}, cmd...), "--url is required"},
		{append([]string{"run", "--url", "mem://"}, cmd...), "--key is required"},
		{[]string{"run", "--url", "mem://", "--key", "k"}, "no command"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--bogus"}, cmd...), "flag provided but not defined: -bogus"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--wait", "soon"}, cmd...), "invalid value \"soon\" for flag -wait"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--wait", "-1s"}, cmd...), "negative wait"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--ttl", "-1s"}, cmd...), "--ttl"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--grace", "-1s"}, cmd...), "--grace"},
		{append([]string{"run", "--url", "nope://x", "--key", "k"}, cmd...), `unknown scheme "nope"`},
		{append([]string{"run", "--url", "127.0.0.1:6379", "--key", "k"}, cmd...), "--url"},
		{append([]string{"run", "--url", "mem://?x=1", "--key", "k"}, cmd...), `unknown query parameter "x"`},
		{append([]string{"run", "--url", "mem://", "--key", strings.Repeat("k", 256)}, cmd...), "invalid key"},
		{append([]string{"run", "--url", "mem://", "--key", "k", "--metrics-addr", "nocolon"}, cmd...), "--metrics-addr"},
	} {
		code, stderr := runDlock(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("dlock %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// TestGraceBound: a --grace that would warn a healthy command (SIGTERM before a
// regular renewal, at a third of the TTL, moved the deadline) is a usage error that
// names the bound, half the TTL; the bound itself is accepted.
func TestGraceBound(t *testing.T) {
	for _, c := range []struct {
		ttl, grace string
		want       int
	}{
		{"10s", "6.6s", exitUsage}, // SIGTERM at 3.3s, just before the renewal
		{"10s", "5.1s", exitUsage},
		{"10s", "5s", 0},
		{"", "5.1s", exitUsage}, // the default TTL, 10s
		{"", "5s", 0},
	} {
		args := []string{"run", "--url", "mem://", "--key", "k", "--grace", c.grace}
		if c.ttl != "" {
			args = append(args, "--ttl", c.ttl)
		}
		code, stderr := runDlock(t, append(args, "--", childBin, "exit", "0")...)
		if code != c.want || (c.want == exitUsage && !strings.Contains(stderr, "at most 5s")) {
			t.Errorf("--ttl %q --grace %s: exit %d, stderr %q; want exit %d (naming the bound, 5s, when refused)", c.ttl, c.grace, code, stderr, c.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	noexec := filepath.Join(t.TempDir(), "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  []string
		want int
	}{
		{[]string{childBin, "exit", "0"}, 0},
		{[]string{childBin, "exit", "3"}, 3},
		{[]string{childBin, "exit", "75"}, 75}, // the child's code passes through even where it is one of dlock's
		{[]string{childBin, "kill", "15"}, 128 + 15},
		{[]string{childBin, "kill", "9"}, 128 + 9},
		{[]string{filepath.Join(t.TempDir(), "missing")}, exitNotFound},
		{[]string{"dlock-no-such-command"}, exitNotFound},
		{[]string{noexec}, exitCannotExec},
	} {
		args := append([]string{"run", "--url", "mem://", "--key", "k", "--"}, c.cmd...)
		if code, stderr := runDlock(t, args...); code != c.want {
			t.Errorf("dlock run -- %v: exit %d, want %d; stderr:\n%s", c.cmd[1:], code, c.want, stderr)
		}
	}
}

func TestEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "env")
	t.Setenv("DLOCK_TOKEN", "stale") // dlock's own values replace inherited ones
	code, stderr := runDlock(t, "run", "--url", "mem://", "--key", "reports/daily ✓", "--", childBin, "env", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	env := readEnv(t, file)
	if env["DLOCK_KEY"] != "reports/daily ✓" {
		t.Errorf("DLOCK_KEY = %q", env["DLOCK_KEY"])
	}
	if tok, err := strconv.ParseUint(env["DLOCK_TOKEN"], 10, 64); err != nil || tok == 0 {
		t.Errorf("DLOCK_TOKEN = %q, want a positive number (memlock fences)", env["DLOCK_TOKEN"])
	}
}

func readEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	return env
}

// TestSignalForwarding: each forwarded signal sent to dlock reaches the command, and
// dlock then exits with the command's code.
func TestSignalForwarding(t *testing.T) {
	p := startDlock(t, "run", "--url", "mem://", "--key", "k", "--", childBin, "trap", "42")
	expect(t, p.out, "ready")
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM} {
		if err := p.cmd.Process.Signal(s); err != nil {
			t.Fatal(err)
		}
		expect(t, p.out, fmt.Sprintf("got %d", s)) // one at a time: signals of one kind may merge
	}
	p.waitCode(t, 42)
}

func TestSignalKillsCommand(t *testing.T) {
	p := startDlock(t, "run", "--url", "mem://", "--key", "k", "--", childBin, "hold")
	expect(t, p.out, "ready")
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.waitCode(t, 128+int(syscall.SIGTERM))
}

func TestMetrics(t *testing.T) {
	p := startDlock(t, "run", "--url", "mem://", "--key", "k", "--metrics-addr", "127.0.0.1:0", "--", childBin, "hold")
	line := expect(t, p.errs, "metrics at ")
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])
	expect(t, p.out, "ready")
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`dlock_leases_held{backend="mem"} 1`,
		`dlock_acquire_duration_seconds_count{backend="mem",outcome="acquired"} 1`,
		`dlock_acquire_attempts_total{backend="mem"} 1`,
		"go_goroutines ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	p.stdin.Close() // the command ends
	p.waitCode(t, 0)
}

func TestMetricsAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, stderr := runDlock(t, "run", "--url", "mem://", "--key", "k", "--metrics-addr", ln.Addr().String(), "--", childBin, "exit", "0")
	if code != exitOSErr || !strings.Contains(stderr, "address already in use") {
		t.Errorf("exit %d, stderr %q; want %d and address already in use", code, stderr, exitOSErr)
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUnreachable(t *testing.T) {
	addr := closedAddr(t)
	for _, url := range []string{"redis://" + addr, "mysql://root@" + addr + "/db"} {
		code, stderr := runDlock(t, "run", "--url", url, "--key", "k", "--wait", "0", "--", childBin, "exit", "0")
		if code != exitUnavailable || !strings.Contains(stderr, "connection refused") {
			t.Errorf("%s: exit %d, stderr %q; want %d and the cause", url, code, stderr, exitUnavailable)
		}
	}
}

// redisURL is the URL of the test binary's shared Redis.
func redisURL(t *testing.T) string {
	return "redis://" + servertest.Redis(t).Addr()
}

// holdLock takes key on url in the test process until the test ends.
func holdLock(t *testing.T, url, key string) dlock.Lease {
	t.Helper()
	ctx := context.Background()
	l, err := dlock.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ls, err := l.TryAcquire(ctx, key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func TestWaitTimeout(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	holdLock(t, url, key)
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		t0 := time.Now()
		code, stderr := runDlock(t, "run", "--url", url, "--key", key, "--wait", wait.String(), "--", childBin, "exit", "0")
		if code != exitTempFail || !strings.Contains(stderr, "not acquired") {
			t.Errorf("--wait %v: exit %d, stderr %q; want %d", wait, code, stderr, exitTempFail)
		}
		if el := time.Since(t0); el < wait {
			t.Errorf("--wait %v gave up after %v", wait, el)
		}
	}
}

// TestSignalWhileWaiting: a signal while dlock waits for the lock ends the wait
// (128+n) without running the command.
func TestSignalWhileWaiting(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	holdLock(t, url, key)
	file := filepath.Join(t.TempDir(), "env")
	// The metrics line on stderr says dlock is up with its signal handlers in place.
	p := startDlock(t, "run", "--url", url, "--key", key, "--metrics-addr", "127.0.0.1:0", "--", childBin, "env", file)
	expect(t, p.errs, "metrics at ")
	p.cmd.Process.Signal(syscall.SIGINT)
	p.waitCode(t, 128+int(syscall.SIGINT))
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the command ran although the lock was never acquired (%v)", err)
	}
}

// TestWaitsForRelease: a waiting dlock runs its command once the holder releases,
// with a larger fencing token.
func TestWaitsForRelease(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	held := holdLock(t, url, key)
	file := filepath.Join(t.TempDir(), "env")
	p := startDlock(t, "run", "--url", url, "--key", key, "--metrics-addr", "127.0.0.1:0", "--", childBin, "env", file)
	expect(t, p.errs, "metrics at ")
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.waitCode(t, 0)
	env := readEnv(t, file)
	if tok, _ := strconv.ParseUint(env["DLOCK_TOKEN"], 10, 64); tok <= held.Token() {
		t.Errorf("DLOCK_TOKEN %q, want more than the previous holder's %d", env["DLOCK_TOKEN"], held.Token())
	}
}

// TestLeaseLoss: the lock is deleted behind dlock's back; the renewal finds it gone,
// and since another holder may already be inside, dlock kills the command at once
// (no SIGTERM first) and exits 76.
func TestLeaseLoss(t *testing.T) {
	r := servertest.Redis(t)
	key := uniqueKey(t)
	p := startDlock(t, "run", "--url", "redis://"+r.Addr(), "--key", key, "--ttl", "900ms", "--", childBin, "hold")
	expect(t, p.out, "ready")
	if _, err := r.Do(context.Background(), "DEL", key); err != nil {
		t.Fatal(err)
	}
	expect(t, p.errs, "lost")
	p.waitCode(t, exitLost)
	if s := p.stderrText(); !strings.Contains(s, "SIGKILL") || strings.Contains(s, "SIGTERM") {
		t.Errorf("stderr: %s; want SIGKILL at once, without SIGTERM", s)
	}
}

// TestLeaseLossKillsProcessGroup: a command (and its child) that ignore SIGTERM are
// killed when the lease is lost; nothing the command started survives.
func TestLeaseLossKillsProcessGroup(t *testing.T) {
	r := servertest.Redis(t)
	key := uniqueKey(t)
	p := startDlock(t, "run", "--url", "redis://"+r.Addr(), "--key", key, "--ttl", "900ms", "--", childBin, "stubborn")
	expect(t, p.out, "ready grandchild")
	if _, err := r.Do(context.Background(), "DEL", key); err != nil {
		t.Fatal(err)
	}
	expect(t, p.errs, "sent SIGKILL")
	p.waitCode(t, exitLost)
	// Every process holding the stdout pipe must be gone: the grandchild too.
	select {
	case _, ok := <-p.out:
		for ok {
			_, ok = <-p.out
		}
	case <-time.After(patience):
		t.Fatal("a process started by the command outlived the lost lease")
	}
}

// stampBoundary reads a file of "ID <unix ns>" lines from two writers A and B and
// returns A's last and B's first time.
func stampBoundary(file string) (lastA, firstB time.Time, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return lastA, firstB, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			return lastA, firstB, fmt.Errorf("bad line %q", l)
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return lastA, firstB, fmt.Errorf("bad line %q", l)
		}
		at := time.Unix(0, ns)
		switch {
		case f[0] == "A" && at.After(lastA):
			lastA = at
		case f[0] == "B" && (firstB.IsZero() || at.Before(firstB)):
			firstB = at
		}
	}
	if lastA.IsZero() || firstB.IsZero() {
		return lastA, firstB, fmt.Errorf("want stamps of A and B in:\n%s", data)
	}
	return lastA, firstB, nil
}

// TestStampBoundary shows that the check of TestCommandNeverOutlivesLock can fail.
func TestStampBoundary(t *testing.T) {
	file := filepath.Join(t.TempDir(), "stamps")
	if err := os.WriteFile(file, []byte("A 100\nB 90\nA 200\nB 300\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lastA, firstB, err := stampBoundary(file)
	if err != nil || lastA.Before(firstB) {
		t.Errorf("overlapping writers: last A %v, first B %v, %v; want the overlap seen", lastA.UnixNano(), firstB.UnixNano(), err)
	}
}

// TestNoOverlap: two dlock processes taking turns on one key never run their
// commands at the same time; the fencing tokens increase.
func TestNoOverlap(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	file := filepath.Join(t.TempDir(), "log")
	const runs = 4
	var wg sync.WaitGroup
	for id := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs {
				code, stderr := runDlock(t, "run", "--url", url, "--key", key, "--ttl", "5s", "--", childBin, "critical", file, strconv.Itoa(id))
				if code != 0 {
					t.Errorf("exit %d: %s", code, stderr)
				}
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := checkTurns(string(b)); err != nil {
		t.Errorf("%v in:\n%s", err, b)
	} else if n != 2*runs {
		t.Errorf("%d critical sections, want %d", n, 2*runs)
	}
}

// checkTurns checks a log of "enter ID TOKEN" / "leave ID" lines: every enter is
// followed by the leave of the same ID before the next enter, and tokens increase.
// It returns the number of critical sections.
func checkTurns(log string) (int, error) {
	inside, n := "", 0
	var last uint64
	for i, l := range strings.Split(strings.TrimSpace(log), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "enter":
			if inside != "" {
				return n, fmt.Errorf("line %d: %s entered while %s was inside", i+1, f[1], inside)
			}
			tok, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil || tok <= last {
				return n, fmt.Errorf("line %d: token %q after %d", i+1, f[2], last)
			}
			inside, last = f[1], tok
			n++
		case len(f) == 2 && f[0] == "leave" && f[1] == inside:
			inside = ""
		default:
			return n, fmt.Errorf("line %d: unexpected %q (inside: %q)", i+1, l, inside)
		}
	}
	return n, nil
}

// TestCheckTurns shows that the overlap check of TestNoOverlap can fail.
func TestCheckTurns(t *testing.T) {
	if _, err := checkTurns("enter 0 1\nleave 0\nenter 1 2\nleave 1\n"); err != nil {
		t.Errorf("good log: %v", err)
	}
	for _, bad := range []string{
		"enter 0 1\nenter 1 2\nleave 0\nleave 1\n", // overlap
		"enter 0 2\nleave 0\nenter 1 2\nleave 1\n", // token not increasing
		"enter 0 1\nleave 1\n",                     // leave by another
	} {
		if _, err := checkTurns(bad); err == nil {
			t.Errorf("bad log passed:\n%s", bad)
		}
	}
}
