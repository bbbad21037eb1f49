package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// TestInspect: "dlock inspect" shows the holder a running "dlock run" recorded (its
// pid, the name "dlock run", the token, the time left) and a library holder's
// record, quoted where it holds control characters; --json says the same; "dlock
// ls" lists the keys under a prefix and nothing under another; a free key exits 3.
func TestInspect(t *testing.T) {
	url, base := redisURL(t), uniqueKey(t)
	runKey, libKey := base+"/run", base+"/lib"

	p := startDlock(t, "run", "--url", url, "--key", runKey, "--ttl", "30s", "--", childBin, "hold")
	if line := <-p.out; line != "ready" {
		t.Fatalf("the command under the lock said %q", line)
	}
	l, err := dlock.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	forged := "worker\x1b[31m\nholder\tfake"
	ls, err := l.TryAcquire(context.Background(), libKey, dlock.WithTTL(time.Minute), dlock.WithHolder(dlock.Holder{Host: "h1", PID: 42, Name: forged}))
	if err != nil {
		t.Fatal(err)
	}

	code, out := runDlockOut(t, "inspect", "--url", url, runKey, libKey)
	if code != exitOK {
		t.Fatalf("dlock inspect: exit %d, want 0; stdout:\n%s", code, out)
	}
	for _, want := range []string{
		runKey + "\tlock",
		fmt.Sprintf("pid %d\tname dlock run", p.cmd.Process.Pid),
		libKey + "\tlock",
		fmt.Sprintf("token %d", ls.Token()),
		"host h1\tpid 42\tname " + fmt.Sprintf("%q", forged),
		"\tttl ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dlock inspect's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Count(out, "\n") != 4 {
		t.Errorf("a recorded name forged output (an escape or a line of its own):\n%q", out)
	}

	code, out = runDlockOut(t, "inspect", "--url", url, "--json", libKey)
	var states []struct {
		Key     string `json:"key"`
		Kind    string `json:"kind"`
		Holders []struct {
			Token      uint64        `json:"token"`
			TTLSeconds float64       `json:"ttl_seconds"`
			Holder     *dlock.Holder `json:"holder"`
		} `json:"holders"`
	}
	if err := json.Unmarshal([]byte(out), &states); code != exitOK || err != nil {
		t.Fatalf("dlock inspect --json: exit %d, %v:\n%s", code, err, out)
	}
	if len(states) != 1 || states[0].Key != libKey || states[0].Kind != "lock" || len(states[0].Holders) != 1 {
		t.Fatalf("dlock inspect --json: %+v", states)
	}
	h := states[0].Holders[0]
	if h.Token != ls.Token() || h.TTLSeconds <= 0 || h.TTLSeconds > 60 || h.Holder == nil || h.Holder.Name != forged || h.Holder.PID != 42 {
		t.Errorf("dlock inspect --json: holder %+v (record %+v), want token %d, ttl in (0, 60], the record", h, h.Holder, ls.Token())
	}

	code, out = runDlockOut(t, "ls", "--url", url, base+"/")
	if code != exitOK || !strings.Contains(out, runKey+"\tlock") || !strings.Contains(out, libKey+"\tlock") {
		t.Errorf("dlock ls %s/: exit %d:\n%s", base, code, out)
	}
	if code, out = runDlockOut(t, "ls", "--url", url, base+"-none/"); code != exitOK || out != "" {
		t.Errorf("dlock ls of an empty prefix: exit %d, output %q; want 0 and nothing", code, out)
	}
	if code, _ = runDlock(t, "inspect", "--url", url, base+"/free"); code != exitNothingHeld {
		t.Errorf("dlock inspect of a free key: exit %d, want %d", code, exitNothingHeld)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
}

// TestInspectUsage: a missing key, a bad key, a second prefix and a bad URL are
// usage errors that name the problem.
func TestInspectUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"inspect", "--url", "mem://"}, "KEY is required"},
		{[]string{"inspect", "--url", "mem://", ""}, "key"},
		{[]string{"ls", "--url", "mem://", "a", "b"}, "at most one PREFIX"},
		{[]string{"inspect", "--url", "nosuch://x", "k"}, "--url"},
		{[]string{"inspect", "k"}, "--url"},
	} {
		code, stderr := runDlock(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.says) {
			t.Errorf("dlock %v: exit %d, stderr %q; want %d naming %q", c.args, code, stderr, exitUsage, c.says)
		}
	}
}
