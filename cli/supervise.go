package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

// A supervised command never outlives its lease (see runHelp for the user's view):
//
//   - per-lease TTL: while renewals succeed the lease has at least two thirds of its
//     TTL left. Once renewals have failed for so long that less than the grace period
//     is left before the local validity deadline, the command's process group gets
//     SIGTERM; at the deadline — when the lease's Done closes, before the store can
//     free the lock — it gets SIGKILL.
//   - session leases (ZooKeeper, GET_LOCK) end when the client concludes that its
//     session may be gone, a third (ZooKeeper) or at most two thirds (GET_LOCK) of the
//     session timeout before the server frees the lock: SIGTERM then, SIGKILL after
//     the grace period, which is at most a third of the session timeout.
//   - any loss the store reports (the lock gone or taken) ends the lease at once: the
//     group gets SIGKILL at once, since another holder may already be inside.
//   - a stop of dlock that it can catch (SIGTSTP, or Ctrl-Z on its terminal) stops the
//     command's group too; when dlock is continued it checks the lease before it
//     continues the command, and kills the command if the lease ended meanwhile.

// supervisor runs one command under one lease.
type supervisor struct {
	name  string        // the command's name in messages ("run", "elect")
	key   string        // the lock's key, in messages and DLOCK_KEY
	grace time.Duration // SIGTERM this long before the deadline
	env   []string      // extra environment of the command
}

// checkPeriod is how often the supervisor compares the lease's deadline with the
// grace period: the SIGTERM comes at most this late.
const checkPeriod = 20 * time.Millisecond

// run starts argv under lease, waits for it, and returns dlock's exit code. sigs
// carries the signals dlock catches (forwarded ones, and SIGTSTP).
func (s supervisor) run(argv []string, lease dlock.Lease, sigs <-chan os.Signal) int {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(append(os.Environ(), "DLOCK_KEY="+s.key, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10)), s.env...)
	tty := foregroundTTY()
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if tty != nil {
		child.SysProcAttr.Foreground = true
		child.SysProcAttr.Ctty = 0 // the child's stdin, which is the terminal
	}
	if err := child.Start(); err != nil {
		releaseQuietly(lease)
		fmt.Fprintf(os.Stderr, "dlock %s: %v\n", s.name, err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	pgid := child.Process.Pid
	held := func() bool { return lease.Err() == nil }
	var status syscall.WaitStatus
	var waitErr error
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		status, waitErr = waitChild(child, tty, held)
	}()
	if tty != nil {
		defer tty.restore()
	}

	warned := false
	var kill <-chan time.Time // session leases: SIGKILL after the grace period
	tick := time.NewTicker(checkPeriod)
	defer tick.Stop()
	leaseDone := lease.Done()
	lost := false
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTSTP {
				stopTogether(pgid, held)
				continue
			}
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
			continue
		case <-tick.C:
			if d, ok := dlock.Deadline(lease); ok && !warned && time.Until(d) < s.grace {
				warned = true
				fmt.Fprintf(os.Stderr, "dlock %s: renewals of %q are failing: the lease ends in %v; sending SIGTERM to the command, SIGKILL then\n",
					s.name, s.key, time.Until(d).Round(time.Millisecond))
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
			}
			continue
		case <-leaseDone:
			leaseDone = nil
			lost = true
			if _, ok := dlock.Deadline(lease); ok || !errors.Is(lease.Err(), dlock.ErrLost) || s.grace == 0 {
				fmt.Fprintf(os.Stderr, "dlock %s: lease on %q lost: %v; sending SIGKILL to the command\n", s.name, s.key, lease.Err())
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				continue
			}
			fmt.Fprintf(os.Stderr, "dlock %s: lease on %q lost: %v; sending SIGTERM to the command, SIGKILL in %v\n", s.name, s.key, lease.Err(), s.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(s.grace)
			defer t.Stop()
			kill = t.C
			continue
		case <-kill:
			kill = nil
			fmt.Fprintf(os.Stderr, "dlock %s: the command did not exit %v after SIGTERM; sending SIGKILL\n", s.name, s.grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			continue
		case <-exited:
		}
		break
	}
	if lost || lease.Err() != nil {
		// The command is done but what it started may not be: nothing may go on
		// working without the lock.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if !lost {
			fmt.Fprintf(os.Stderr, "dlock %s: lease on %q ended while the command finished: %v\n", s.name, s.key, lease.Err())
		}
		return exitLost
	}
	if waitErr != nil {
		releaseQuietly(lease)
		fmt.Fprintf(os.Stderr, "dlock %s: waiting for the command: %v\n", s.name, waitErr)
		return exitSoftware
	}
	code := exitCode(status)
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			fmt.Fprintf(os.Stderr, "dlock %s: lease on %q was lost before the command finished: %v\n", s.name, s.key, err)
			return exitLost
		}
		fmt.Fprintf(os.Stderr, "dlock %s: warning: release of %q failed (it frees itself when its TTL ends): %v\n", s.name, s.key, err)
	}
	return code
}

// stopTogether stops the command's group, then dlock itself, as a SIGTSTP asks;
// when dlock is continued it continues the command only if the lease is still held
// (held), and kills it otherwise.
func stopTogether(pgid int, held func() bool) {
	_ = syscall.Kill(-pgid, syscall.SIGSTOP)
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	if syscall.Kill(os.Getpid(), syscall.SIGSTOP) == nil {
		<-cont
	}
	if !held() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// defaultGrace is the grace period when none is given: a third of the TTL, so that
// SIGTERM comes only after the renewals at a third and at about half of the TTL have
// failed; for a session lease, a third of the declared session timeout (at most 10s).
func defaultGrace(ttl, session time.Duration, perLease bool) time.Duration {
	if perLease {
		return ttl / 3
	}
	return min(session/3, 10*time.Second)
}

// exitCode is the shell's view of how the command ended.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func releaseQuietly(l dlock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = l.Release(ctx)
}
