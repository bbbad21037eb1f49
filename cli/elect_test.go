package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestElectProcesses: three "dlock elect" processes campaign in one election; one
// runs its command; "dlock leader" names it; it is killed (SIGKILL, its command dies
// with it) and another is elected within the TTL; the commands' own records show
// that two never ran at once.
func TestElectProcesses(t *testing.T) {
	url, name := redisURL(t), uniqueKey(t)
	const ttl = time.Second
	file := filepath.Join(t.TempDir(), "ticks")
	ps := make([]*proc, 3)
	for i := range ps {
		id := fmt.Sprintf("c%d", i)
		ps[i] = startDlock(t, "elect", "--url", url, "--name", name, "--ttl", ttl.String(), "--value", id, "--", childBin, "tick", file, id)
	}
	// waitReady returns the process (not skip) whose command says it runs.
	waitReady := func(skip int, within time.Duration) int {
		t.Helper()
		deadline := time.After(within)
		for {
			for i, p := range ps {
				if i == skip {
					continue
				}
				select {
				case line := <-p.out:
					if line == "ready" {
						return i
					}
				default:
				}
			}
			select {
			case <-deadline:
				t.Fatalf("no command started within %v", within)
			case <-time.After(5 * time.Millisecond): // three pipes, no select over a slice: look again
			}
		}
	}
	first := waitReady(-1, patience)
	code, out := runDlockOut(t, "leader", "--url", url, "--name", name)
	if f := strings.Fields(out); code != 0 || len(f) != 2 || f[1] != fmt.Sprintf("c%d", first) {
		t.Errorf("dlock leader: exit %d, %q; want the token and c%d", code, out, first)
	}
	time.Sleep(3 * ttl) // the others keep campaigning meanwhile: none may start
	for i, p := range ps {
		if i != first && len(p.out) > 0 {
			t.Fatalf("c%d started its command while c%d led", i, first)
		}
	}
	killed := time.Now()
	if err := ps[first].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := waitReady(first, ttl+patience)
	took := time.Since(killed)
	if took > ttl+2*time.Second {
		t.Errorf("c%d was elected %v after the leader was killed, want within its %v TTL (+2s)", second, took, ttl)
	}
	t.Logf("c%d elected %v after c%d was killed (ttl %v)", second, took.Round(time.Millisecond), first, ttl)

	// The commands' records: every line of the first leader before the second's start.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var lastFirst, startSecond int64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		at, _ := strconv.ParseInt(f[2], 10, 64)
		switch {
		case f[0] == fmt.Sprintf("c%d", first):
			lastFirst = max(lastFirst, at)
		case f[0] == fmt.Sprintf("c%d", second) && f[1] == "start":
			startSecond = at
		case f[1] == "start":
			t.Errorf("a third command started: %q", line)
		}
	}
	if startSecond <= lastFirst {
		t.Errorf("two leaders at once: c%d started at %d, c%d still wrote at %d", second, startSecond, first, lastFirst)
	}
	t.Logf("c%d's last write came %v before c%d started", first, time.Duration(startSecond-lastFirst).Round(time.Millisecond), second)
}

// runDlockOut runs dlock to the end and returns its exit code and stdout.
func runDlockOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := startDlock(t, args...)
	var out strings.Builder
	for line := range p.out {
		out.WriteString(line + "\n")
	}
	code := p.wait(t)
	drain(p.errs)
	return code, out.String()
}

// TestLeaderWatch: "dlock leader --watch" prints the current leader, then each new
// one, and exits 0 on SIGINT; without --watch and without a leader it exits 3.
func TestLeaderWatch(t *testing.T) {
	url, name := redisURL(t), uniqueKey(t)
	if code, _ := runDlock(t, "leader", "--url", url, "--name", name); code != exitNoLeader {
		t.Errorf("dlock leader with no leader: exit %d, want %d", code, exitNoLeader)
	}
	first := startDlock(t, "elect", "--url", url, "--name", name, "--value", "one", "--", childBin, "hold")
	if line := <-first.out; line != "ready" {
		t.Fatalf("the first leader's command said %q", line)
	}
	w := startDlock(t, "leader", "--url", url, "--name", name, "--watch")
	expectLine := func(value string) {
		t.Helper()
		select {
		case line := <-w.out:
			if f := strings.Fields(line); len(f) != 2 || f[1] != value {
				t.Fatalf("dlock leader --watch printed %q, want a token and %q", line, value)
			}
		case <-time.After(patience):
			t.Fatalf("dlock leader --watch printed nothing for %s within %v", value, patience)
		}
	}
	expectLine("one")
	second := startDlock(t, "elect", "--url", url, "--name", name, "--value", "two", "--", childBin, "hold")
	first.stdin.Close() // the first command exits: its dlock resigns
	if code := first.wait(t); code != 0 {
		t.Errorf("the first dlock elect exited %d", code)
	}
	expectLine("two")
	if line := <-second.out; line != "ready" {
		t.Fatalf("the second leader's command said %q", line)
	}
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := w.wait(t); code != 0 {
		t.Errorf("dlock leader --watch exited %d on SIGINT, want 0", code)
	}
}

// TestLeaderEscapesValues: a candidate's value with a newline, a tab, terminal
// escapes, a backslash and invalid UTF-8 is printed by "dlock leader" (and --watch)
// as one line of two tab-separated fields, the value escaped as in a Go string
// literal: it forges no line and no field, and unquoting gives it back.
func TestLeaderEscapesValues(t *testing.T) {
	url, name := redisURL(t), uniqueKey(t)
	value := "evil\n1\tforged\x1b[2J\x1b]0;title\a\\\"\xff\u202e"
	p := startDlock(t, "elect", "--url", url, "--name", name, "--value", value, "--", childBin, "hold")
	if line := <-p.out; line != "ready" {
		t.Fatalf("the leader's command said %q", line)
	}
	check := func(what, out string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 1 {
			t.Fatalf("%s printed %d lines, want 1: %q", what, len(lines), out)
		}
		fields := strings.Split(lines[0], "\t")
		if len(fields) != 2 {
			t.Fatalf("%s printed %d tab-separated fields, want 2: %q", what, len(fields), lines[0])
		}
		if strings.ContainsAny(fields[1], "\x1b\a\r") {
			t.Errorf("%s printed control characters: %q", what, fields[1])
		}
		if got, err := strconv.Unquote(`"` + fields[1] + `"`); err != nil || got != value {
			t.Errorf("%s printed %q, which unquotes to %q (%v), want %q", what, fields[1], got, err, value)
		}
	}
	code, out := runDlockOut(t, "leader", "--url", url, "--name", name)
	if code != 0 {
		t.Fatalf("dlock leader: exit %d", code)
	}
	check("dlock leader", out)
	w := startDlock(t, "leader", "--url", url, "--name", name, "--watch")
	select {
	case line := <-w.out:
		check("dlock leader --watch", line+"\n")
	case <-time.After(patience):
		t.Fatalf("dlock leader --watch printed nothing within %v", patience)
	}
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	w.wait(t)
	p.stdin.Close()
	p.wait(t)
}
