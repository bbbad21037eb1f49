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
