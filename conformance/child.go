package conformance

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// The fault scenarios run lock holders as real OS processes, so that they can be
// killed (SIGKILL) and paused (SIGSTOP). The child is the test binary itself, started
// again with the environment below; its TestMain must call ChildMain first.

const (
	envChild    = "DLOCK_CONFORMANCE_CHILD" // set to "holder" in a child
	envURL      = "DLOCK_CHILD_URL"
	envKey      = "DLOCK_CHILD_KEY"
	envTTL      = "DLOCK_CHILD_TTL"
	envResource = "DLOCK_CHILD_RESOURCE"
	envHolder   = "DLOCK_CHILD_HOLDER"
	envWaiter   = "DLOCK_CHILD_WAITER" // "1": say "WAITING" before Acquire
	envKind     = "DLOCK_CHILD_KIND"   // what the holder takes: "" (the mutex) or a primitive (childAcquire)
)

// ChildMain turns this process into a lock holder when a fault scenario started it
// as one, and returns at once otherwise. Call it first in TestMain of every package
// whose harness implements URLer:
//
//	func TestMain(m *testing.M) { conformance.ChildMain(); os.Exit(m.Run()) }
//
// The holder opens the backend by URL (the backend package must be imported by the
// test binary), says "WAITING" first if it was started as a waiter (WaiterCrash),
// acquires the key, says "HELD <token> <start-unix-ns>", checks its
// lease is still valid and says "CHECKED", then obeys one line on stdin: "WRITE"
// enters the protected resource with its token (without checking its lease again:
// the pause comes between the check and the write) and says "WROTE <answer>";
// "RELEASE" releases. Then it exits.
func ChildMain() {
	if os.Getenv(envChild) != "holder" {
		return
	}
	if err := holder(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stdout, "ERROR", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func holder(in io.Reader, out io.Writer) error {
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fmt.Errorf("%s: %w", envTTL, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := dlock.Open(ctx, os.Getenv(envURL))
	if err != nil {
		return err
	}
	defer l.Close()
	call := mono()
	if os.Getenv(envWaiter) == "1" {
		fmt.Fprintln(out, "WAITING", call)
	}
	ls, err := childAcquire(ctx, l, os.Getenv(envKey), os.Getenv(envKind), dlock.WithTTL(ttl))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "HELD", ls.Token(), call, mono())
	go func() { // the end of the lease, for the history: "DONE <mono> <why>"
		<-ls.Done()
		at, why := mono(), "released"
		if err := ls.Err(); err != nil {
			why = err.Error()
		}
		fmt.Fprintln(out, "DONE", at, strings.ReplaceAll(why, "\n", " "))
	}()
	select {
	case <-ls.Done():
		return fmt.Errorf("lease ended before the check: %w", ls.Err())
	default:
		fmt.Fprintln(out, "CHECKED")
	}
	cmd, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return err
	}
	switch strings.TrimSpace(cmd) {
	case "WRITE":
		holder := os.Getenv(envHolder)
		ans, err := resourceCall(os.Getenv(envResource), fmt.Sprintf("ENTER %s %d", holder, ls.Token()))
		if err != nil {
			return err
		}
		if ans == "OK" {
			if _, err := resourceCall(os.Getenv(envResource), "LEAVE "+holder); err != nil {
				return err
			}
		}
		fmt.Fprintln(out, "WROTE", ans)
	case "RELEASE":
		return ls.Release(ctx)
	}
	return nil
}

// child is a holder process seen from the test. With a recorder, what the child
// reports — its acquisition's call and grant, its lease's end — goes into the current
// trial's history, stamped with the child's own reading of the shared monotonic
// clock, and so do the signals the test sends it.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	token uint64
	call  int64 // mono() when the child began to acquire

	rec    *recorder
	name   string
	what   Event // key, kind of what the child takes
	h      *history
	mu     sync.Mutex
	seq    int64 // the acquisition's sequence number in h
	held   bool  // granted and not yet ended
	paused func(error, Event) Event
}

// startHolderOf starts a holder of key's kind (see childAcquire) on url and waits
// until it holds its lease.
func startHolderOf(t testing.TB, rec *recorder, kind, url, key string, ttl time.Duration, resource, name string) *child {
	t.Helper()
	c := startChild(t, rec, kind, url, key, ttl, resource, name, false)
	c.expect("HELD", time.Minute)
	c.expect("CHECKED", time.Minute)
	return c
}

// startWaiter starts a child that asks for the mutex key on url (a lock another
// client holds) and returns once it is about to call Acquire.
func startWaiter(t testing.TB, rec *recorder, url, key string, ttl time.Duration, name string) *child {
	t.Helper()
	c := startChild(t, rec, "", url, key, ttl, "", name, true)
	c.expect("WAITING", time.Minute)
	return c
}

// record takes what a child's line reports into the history; it reports whether the
// line is for the history alone (DONE) rather than for expect.
func (c *child) record(line string) bool {
	f := strings.Fields(line)
	if len(f) == 0 {
		return false
	}
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f[0] {
	case "WAITING":
		if c.h != nil {
			c.seq = c.h.next()
			e := c.what
			e.T, e.Seq, e.Client, e.Op, e.Phase = num(1), c.seq, c.name, OpAcquire, Call
			c.h.add(e)
		}
	case "HELD":
		tok, _ := strconv.ParseUint(f[1], 10, 64)
		c.token, c.call = tok, num(2)
		if c.h != nil {
			if c.seq == 0 {
				c.seq = c.h.next()
				e := c.what
				e.T, e.Seq, e.Client, e.Op, e.Phase = num(2), c.seq, c.name, OpAcquire, Call
				c.h.add(e)
			}
			e := c.what
			e.T, e.Seq, e.Client, e.Op, e.Phase, e.Token = num(3), c.seq, c.name, OpAcquire, OK, tok
			c.h.add(e)
			c.held = true
		}
	case "DONE":
		if c.h != nil && c.held {
			c.held = false
			e := c.what
			e.T, e.Client, e.Op, e.Lease, e.Phase = num(1), c.name, OpEnd, c.seq, ""
			e.Err = strings.Join(f[2:], " ")
			c.h.add(e)
		}
		return true
	}
	return false
}

// startChild starts the test binary as a holder (or waiter) child of key's kind.
func startChild(t testing.TB, rec *recorder, kind, url, key string, ttl time.Duration, resource, name string, waiter bool) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=holder", envURL+"="+url, envKey+"="+key,
		envTTL+"="+ttl.String(), envResource+"="+resource, envHolder+"="+name, envKind+"="+kind)
	if waiter {
		cmd.Env = append(cmd.Env, envWaiter+"=1")
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16), rec: rec, name: name, what: childWhat(kind, key)}
	if rec != nil {
		c.h = rec.hist()
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if !c.record(sc.Text()) {
				c.lines <- sc.Text()
			}
		}
	}()
	t.Cleanup(c.kill)
	return c
}

// expect waits for the child's next line, which must start with word.
func (c *child) expect(word string, within time.Duration) string {
	c.t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.t.Fatalf("holder child exited before saying %s (does TestMain call conformance.ChildMain?)", word)
		}
		if !strings.HasPrefix(line, word) {
			c.t.Fatalf("holder child said %q, want %s", line, word)
		}
		return line
	case <-time.After(within):
		c.t.Fatalf("holder child did not say %s within %v", word, within)
	}
	return ""
}

// signal sends sig to the child and records it: SIGKILL as a fault that ends the
// child's lease, SIGSTOP as the start of a pause that SIGCONT ends.
func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	var done func(error, Event) Event
	if c.h != nil {
		switch sig {
		case syscall.SIGKILL, syscall.SIGSTOP:
			done = c.h.call("", OpFault, Event{Note: fmt.Sprintf("%s %s", sigName(sig), c.name)})
		case syscall.SIGCONT:
			c.mu.Lock()
			done, c.paused = c.paused, nil
			c.mu.Unlock()
		}
	}
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to holder child: %v", sig, err)
	}
	if done == nil {
		return
	}
	switch sig {
	case syscall.SIGKILL:
		at := done(nil, Event{})
		c.mu.Lock()
		if c.held { // a process killed holds nothing from now on
			c.held = false
			e := c.what
			e.T, e.Client, e.Op, e.Lease, e.Err = at.T, c.name, OpEnd, c.seq, "killed (SIGKILL)"
			c.h.add(e)
		}
		c.mu.Unlock()
	case syscall.SIGSTOP:
		c.mu.Lock()
		c.paused = done
		c.mu.Unlock()
	case syscall.SIGCONT:
		done(nil, Event{})
	}
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSTOP:
		return "SIGSTOP"
	}
	return sig.String()
}

// childWhat is the key and kind of what a child of kind takes on key, as the history
// names them.
func childWhat(kind, key string) Event {
	switch {
	case kind == "":
		return Event{Key: key}
	case strings.HasPrefix(kind, "semaphore:"):
		n, _ := strconv.Atoi(strings.TrimPrefix(kind, "semaphore:"))
		return Event{Key: key, Kind: "permit", Limit: n}
	case kind == "election":
		return Event{Key: key, Kind: "term"}
	}
	return Event{Key: key, Kind: kind}
}

func (c *child) send(cmd string) {
	c.t.Helper()
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		c.t.Fatalf("holder child stdin: %v", err)
	}
}

// kill ends the child if it still runs and reaps it.
func (c *child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}
