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
	start := time.Now()
	if os.Getenv(envWaiter) == "1" {
		fmt.Fprintln(out, "WAITING")
	}
	ls, err := childAcquire(ctx, l, os.Getenv(envKey), os.Getenv(envKind), dlock.WithTTL(ttl))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "HELD", ls.Token(), start.UnixNano())
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

// child is a holder process seen from the test.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	token uint64
	start time.Time // when the child began to acquire
}

// startHolder starts a holder of key on url and waits until it holds the lock.
func startHolder(t testing.TB, url, key string, ttl time.Duration, resource, name string) *child {
	t.Helper()
	return startHolderOf(t, "", url, key, ttl, resource, name)
}

// startHolderOf starts a holder of key's kind (see childAcquire) on url and waits
// until it holds its lease.
func startHolderOf(t testing.TB, kind, url, key string, ttl time.Duration, resource, name string) *child {
	t.Helper()
	c := startChild(t, kind, url, key, ttl, resource, name, false)
	line := c.expect("HELD", time.Minute)
	f := strings.Fields(line)
	if len(f) != 3 {
		t.Fatalf("holder child said %q", line)
	}
	c.token, _ = strconv.ParseUint(f[1], 10, 64)
	ns, _ := strconv.ParseInt(f[2], 10, 64)
	c.start = time.Unix(0, ns)
	c.expect("CHECKED", time.Minute)
	return c
}

// startWaiter starts a child that asks for the mutex key on url (a lock another
// client holds) and returns once it is about to call Acquire.
func startWaiter(t testing.TB, url, key string, ttl time.Duration, name string) *child {
	t.Helper()
	c := startChild(t, "", url, key, ttl, "", name, true)
	c.expect("WAITING", time.Minute)
	return c
}

// startChild starts the test binary as a holder (or waiter) child of key's kind.
func startChild(t testing.TB, kind, url, key string, ttl time.Duration, resource, name string, waiter bool) *child {
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
	c := &child{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
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

func (c *child) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to holder child: %v", sig, err)
	}
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
