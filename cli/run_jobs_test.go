package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// The job-runner flags of dlock run (--at-least, --at-most, --skip-if-held), end to
// end: two or three dlock run on one key of a real Redis.

// jobPrimitives are the primitives a job can run under: the tests run on each.
var jobPrimitives = []struct {
	name  string
	flags []string
}{
	{"mutex", nil},
	{"semaphore", []string{"--limit", "1"}},
	{"rwlock", []string{"--exclusive"}},
}

// runArgs returns a function that makes the arguments of a dlock run on url and
// key with flags and more.
func runArgs(url, key string, flags []string) func(more ...string) []string {
	return func(more ...string) []string {
		return append(append([]string{"run", "--url", url, "--key", key}, flags...), more...)
	}
}

// waitGone returns once process pid has exited (its pidfd is readable), or fails
// the test after patience. A pid that is gone already counts as exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	const sysPidfdOpen = 434
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return
	}
	if errno != 0 {
		t.Fatalf("pidfd_open(%d): %v", pid, errno)
	}
	defer syscall.Close(int(fd))
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(fd), &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for {
		n, err := syscall.EpollWait(ep, make([]syscall.EpollEvent, 1), int(time.Until(deadline)/time.Millisecond))
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			t.Fatal(err)
		case n == 0:
			t.Fatalf("process %d still running after %v", pid, patience)
		}
		return
	}
}

// pidLine reads the "pid N" line of "child pid" from p's stdout.
func pidLine(t *testing.T, p *proc) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimPrefix(expect(t, p.out, "pid "), "pid "))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestAtLeast: with --at-least D, a job whose command exits at once keeps the lock
// until D after the command started. A second dlock run --skip-if-held, started once
// the first command has exited, is skipped (79) and does not run its command; the
// first dlock exits with its command's code (3), not before D; a third run then gets
// the lock at once. On the mutex, a semaphore's permit and a read-write lock's
// exclusive side.
func TestAtLeast(t *testing.T) {
	url := redisURL(t)
	const d = 6 * time.Second // long enough for the second run to start on a busy machine
	for _, c := range jobPrimitives {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := runArgs(url, uniqueKey(t), c.flags)
			file := filepath.Join(t.TempDir(), "env")
			t0 := time.Now()
			first := startDlock(t, args("--at-least", d.String(), "--", childBin, "pid", "3")...)
			waitGone(t, pidLine(t, first))

			code, stderr := runDlock(t, args("--skip-if-held", "--", childBin, "env", file)...)
			if code != exitSkipped || !strings.Contains(stderr, "skipped") {
				t.Errorf("second run, %v after the first started (--at-least %v), after its command exited: exit %d, stderr %q; want %d (skipped)",
					time.Since(t0).Round(time.Millisecond), d, code, stderr, exitSkipped)
			}
			if _, err := os.Stat(file); !os.IsNotExist(err) {
				t.Errorf("the skipped run's command ran (%v)", err)
			}

			first.waitCode(t, 3)
			if el := time.Since(t0); el < d {
				t.Errorf("the first run released its lock %v after it started, before --at-least %v", el, d)
			}
			if s := first.stderrText(); s != "" {
				t.Errorf("the first run's stderr: %q; want nothing (a hold-over that ends as planned is quiet)", s)
			}

			code, stderr = runDlock(t, args("--skip-if-held", "--", childBin, "env", file)...)
			if code != 0 {
				t.Errorf("third run, after the first exited: exit %d, stderr %q; want 0", code, stderr)
			}
			if _, err := os.Stat(file); err != nil {
				t.Errorf("the third run's command did not run: %v", err)
			}
		})
	}
}

// TestAtLeastSignal: SIGTERM to dlock in the hold-over of --at-least ends it: dlock
// releases the lock and exits with the command's code, long before the hold-over's
// end, and a second run gets the lock at once.
func TestAtLeastSignal(t *testing.T) {
	url, key := redisURL(t), uniqueKey(t)
	first := startDlock(t, "run", "--url", url, "--key", key, "--at-least", "1h", "--", childBin, "pid", "3")
	waitGone(t, pidLine(t, first))
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	first.waitCode(t, 3)
	if s := first.stderrText(); !strings.Contains(s, "terminated") || !strings.Contains(s, "--at-least") {
		t.Errorf("stderr %q; want the signal and the hold-over it ended named", s)
	}
	if code, stderr := runDlock(t, "run", "--url", url, "--key", key, "--skip-if-held", "--", childBin, "exit", "0"); code != 0 {
		t.Errorf("second run: exit %d, stderr %q; want 0 (the lock released)", code, stderr)
	}
}

// TestAtLeastLossInHoldOver: the lock deleted in the hold-over, after the command
// finished and dlock confirmed that the lock was still its own: dlock says so on
// stderr and exits with the command's code (3), not 76, for the command's work was
// done under the lock. The test deletes the key once the store has seen that
// confirmation: every refresh is a PEXPIRE, which Redis announces as an "expire"
// event of the key, and the test waits, after the command's exit, for three of them.
// The confirmation is sent as the command ends, the renewals a third of the TTL apart,
// so the confirmation is among the three.
func TestAtLeastLossInHoldOver(t *testing.T) {
	r := servertest.Redis(t)
	key := uniqueKey(t)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	old, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Kg").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(ctx, "notify-keyspace-events", old["notify-keyspace-events"]) })
	sub := rdb.Subscribe(ctx, "__keyspace@0__:"+key)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription is in place
		t.Fatal(err)
	}
	events := sub.Channel()

	p := startDlock(t, "run", "--url", "redis://"+r.Addr(), "--key", key, "--ttl", "3s", "--at-least", "1h", "--", childBin, "pid", "3")
	waitGone(t, pidLine(t, p))
	timeout := time.After(patience)
	for n := 0; n < 3; {
		select {
		case m := <-events:
			if m.Payload == "expire" {
				n++
			}
		case <-timeout:
			t.Fatalf("no refresh of %q seen within %v", key, patience)
		}
	}
	if _, err := r.Do(ctx, "DEL", key); err != nil {
		t.Fatal(err)
	}
	p.waitCode(t, 3)
	if s := p.stderrText(); !strings.Contains(s, "lost during the --at-least hold-over") || !strings.Contains(s, "another run may start") {
		t.Errorf("stderr %q; want the loss in the hold-over reported, and what it means", s)
	}
}

// TestAtLeastLossWhileRunning: the lock deleted while the command ran, unseen (the
// next renewal is twenty minutes away), is found by the refresh dlock sends before the
// hold-over: exit 76, although the command exited 0 — its work may have overlapped
// another holder's — and no hour-long hold-over.
func TestAtLeastLossWhileRunning(t *testing.T) {
	r := servertest.Redis(t)
	key := uniqueKey(t)
	p := startDlock(t, "run", "--url", "redis://"+r.Addr(), "--key", key, "--ttl", "1h", "--at-least", "1h", "--", childBin, "hold")
	expect(t, p.out, "ready")
	if _, err := r.Do(context.Background(), "DEL", key); err != nil {
		t.Fatal(err)
	}
	p.stdin.Close() // the command exits 0
	p.waitCode(t, exitLost)
	if s := p.stderrText(); !strings.Contains(s, "lost before the command finished") {
		t.Errorf("stderr %q; want the loss placed before the command's end", s)
	}
}

// TestAtMost: a command that runs on is stopped once it has run --at-most D: SIGTERM,
// and for one that ignores SIGTERM (its child too) SIGKILL after --grace; dlock exits
// 124, not before D, nothing of the command's group is left, and the lock is free: a
// second run gets it at once. On the mutex, a semaphore's permit and a read-write
// lock's exclusive side.
func TestAtMost(t *testing.T) {
	url := redisURL(t)
	const d = time.Second
	type tc struct {
		name, ready string
		flags, cmd  []string
	}
	var cases []tc
	for _, p := range jobPrimitives {
		cases = append(cases, tc{p.name + "/sigterm", "ready", p.flags, []string{"hold"}})
	}
	cases = append(cases, tc{"mutex/sigkill", "ready grandchild", nil, []string{"stubborn"}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := runArgs(url, uniqueKey(t), c.flags)
			t0 := time.Now()
			p := startDlock(t, append(args("--ttl", "3s", "--grace", "500ms", "--at-most", d.String(), "--", childBin), c.cmd...)...)
			expect(t, p.out, c.ready)
			p.waitCode(t, exitTimedOut)
			if el := time.Since(t0); el < d {
				t.Errorf("the command was stopped %v after dlock started, before --at-most %v", el, d)
			}
			s := p.stderrText()
			if !strings.Contains(s, "--at-most") || strings.Contains(c.name, "sigkill") != strings.Contains(s, "did not exit after SIGTERM; sent SIGKILL") {
				t.Errorf("stderr %q; want --at-most named, and SIGKILL sent only to a command that ignores SIGTERM", s)
			}
			// Every process holding the stdout pipe must be gone: a grandchild too.
			timeout := time.After(patience)
			for ok := true; ok; {
				select {
				case _, ok = <-p.out:
				case <-timeout:
					t.Fatal("a process of the command outlived --at-most")
				}
			}
			if code, stderr := runDlock(t, args("--skip-if-held", "--", childBin, "exit", "0")...); code != 0 {
				t.Errorf("second run: exit %d, stderr %q; want 0 (the lock released)", code, stderr)
			}
		})
	}
}

// TestSkipIfHeld: --skip-if-held exits 79 at once, without running the command, when
// the lock is held (a mutex, every permit of a semaphore, a read-write lock's
// exclusive side against a shared run) — it does not wait: the holders keep their
// leases a minute, longer than the test waits — and runs the command when it is free.
func TestSkipIfHeld(t *testing.T) {
	url := redisURL(t)
	base := uniqueKey(t)
	held, full, rw, free := base+"/held", base+"/full", base+"/rw", base+"/free"
	holdLock(t, url, held)
	holdPrimitive(t, url, 1, func(l dlock.Locker) (dlock.Lease, error) {
		s, err := dlock.NewSemaphore(l, full, 1)
		if err != nil {
			return nil, err
		}
		return s.TryAcquire(context.Background(), dlock.WithTTL(time.Minute))
	})
	holdPrimitive(t, url, 1, func(l dlock.Locker) (dlock.Lease, error) {
		m, err := dlock.NewRWMutex(l, rw)
		if err != nil {
			return nil, err
		}
		return m.TryAcquire(context.Background(), dlock.WithTTL(time.Minute))
	})
	for _, c := range []struct {
		key   string
		flags []string
		want  int
	}{
		{held, nil, exitSkipped},
		{full, []string{"--limit", "1"}, exitSkipped},
		{rw, []string{"--shared"}, exitSkipped},
		{free, nil, 0},
		{free, []string{"--limit", "1"}, 0},
		{free, []string{"--shared"}, 0},
	} {
		file := filepath.Join(t.TempDir(), "env")
		args := append(append([]string{"run", "--url", url, "--key", c.key, "--skip-if-held"}, c.flags...), "--", childBin, "env", file)
		code, stderr := runDlock(t, args...)
		_, statErr := os.Stat(file)
		ran := statErr == nil
		switch {
		case code != c.want:
			t.Errorf("%v: exit %d, stderr %q; want %d", args[1:], code, stderr, c.want)
		case c.want == exitSkipped && (!strings.Contains(stderr, "skipped") || ran):
			t.Errorf("%v: stderr %q, command ran: %v; want it skipped, and said so", args[1:], stderr, ran)
		case c.want == 0 && !ran:
			t.Errorf("%v: the command did not run: %v", args[1:], statErr)
		}
	}
}

// TestJobUsageErrors: --at-least and --at-most must be positive and at most a year,
// --at-least no longer than --at-most, and --skip-if-held does not go with --wait:
// exit 64 with a message naming the flags; the bounds themselves are accepted.
func TestJobUsageErrors(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  string // "" for accepted
	}{
		{[]string{"--at-least", "0"}, "--at-least must be positive"},
		{[]string{"--at-least", "-1s"}, "--at-least must be positive"},
		{[]string{"--at-most", "0s"}, "--at-most must be positive"},
		{[]string{"--at-most", "8761h"}, "--at-most 8761h0m0s is too long: at most 8760h0m0s"},
		{[]string{"--at-least", "soon"}, `invalid value "soon" for flag -at-least`},
		{[]string{"--at-least", "2m", "--at-most", "1m"}, "--at-least 2m0s is longer than --at-most 1m0s"},
		{[]string{"--skip-if-held", "--wait", "0"}, "--skip-if-held and --wait"},
		{[]string{"--skip-if-held", "--wait", "forever"}, "--skip-if-held and --wait"},
		{[]string{"--at-least", "1ms", "--at-most", "1h"}, ""},
		{[]string{"--at-most", "8760h"}, ""},
		{[]string{"--skip-if-held"}, ""},
	} {
		args := append(append([]string{"run", "--url", "mem://", "--key", "k"}, c.flags...), "--", childBin, "exit", "0")
		code, stderr := runDlock(t, args...)
		switch {
		case c.want == "" && code != 0:
			t.Errorf("%v: exit %d, stderr %q; want 0", c.flags, code, stderr)
		case c.want != "" && (code != exitUsage || !strings.Contains(stderr, c.want)):
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.flags, code, stderr, exitUsage, c.want)
		}
	}
}

// fakeLease is a Lease whose end the test decides.
type fakeLease struct {
	done chan struct{}
	err  error
}

func (f *fakeLease) Key() string                                  { return "k" }
func (f *fakeLease) Token() uint64                                { return 1 }
func (f *fakeLease) Refresh(context.Context, time.Duration) error { return nil }
func (f *fakeLease) Release(context.Context) error                { return nil }
func (f *fakeLease) Done() <-chan struct{}                        { return f.done }
func (f *fakeLease) Err() error                                   { return f.err }

// TestHoldOver: the hold-over of --at-least ends at its time (false: release), on a
// signal that stops jobs (false) — not on SIGUSR1 — and on the lease's end (true: the
// loss is reported and the command's code kept).
func TestHoldOver(t *testing.T) {
	s := supervisor{name: "run", key: "k", atLeast: time.Hour}
	n := newNotes()
	defer n.close()
	live := &fakeLease{done: make(chan struct{})}
	if s.holdOver(live, time.Now().Add(time.Millisecond), nil, n) {
		t.Error("a hold-over that ran to its end reported a loss")
	}
	sigs := make(chan os.Signal, 2)
	sigs <- syscall.SIGUSR1
	sigs <- syscall.SIGTERM
	if s.holdOver(live, time.Now().Add(time.Hour), sigs, n) {
		t.Error("a hold-over ended by SIGTERM reported a loss")
	}
	if len(sigs) != 0 {
		t.Error("the hold-over ended before it read SIGTERM")
	}
	lost := &fakeLease{done: make(chan struct{}), err: &dlock.LossError{Cause: dlock.CauseDeleted}}
	close(lost.done)
	if !s.holdOver(lost, time.Now().Add(time.Hour), nil, n) {
		t.Error("a lease that ended in the hold-over: no loss reported")
	}
}
