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

// A supervised command never outlives its lease (see runHelp for the user's view).
// The command runs in a process group of its own, and every kill goes to the whole
// group:
//
//   - a loss the store reported (the lock deleted or taken, found by a refresh or a
//     watch; the session or connection ended: a ZooKeeper session expired, a GET_LOCK
//     connection killed) may have freed the lock already: SIGKILL at once.
//   - a lease with a deadline — the validity deadline of a per-lease TTL, before which
//     the store cannot free the lock; a ZooKeeper session's while the client is cut off
//     from the ensemble — warns the command (SIGTERM) once less than the grace period
//     is left, and SIGKILL comes at the deadline (a timer of its own, and the lease's
//     end at the deadline, whichever is first). Healthy renewals keep more than the
//     longest grace accepted (half the TTL) ahead, so a healthy command is not warned.
//   - a loss this client inferred before the store can free the lock (a GET_LOCK
//     connection that stopped answering: its server keeps the lock until the lease's
//     HeldUntil) warns the command at once, and SIGKILL comes after the grace period,
//     at HeldUntil at the latest.
//   - after the command's main process exits, whatever is left of its group is killed,
//     and dlock waits until none of it is left, before it releases the lock.
//   - nothing may stop dlock between a decision and its kill: SIGTTOU and SIGTTIN are
//     ignored while the command runs (dlock is in the background of its terminal then,
//     and `stty tostop` would stop it at its first message), each kill is sent before
//     the message that explains it, and messages are written by a goroutine of their
//     own, so that a terminal that does not take them (Ctrl-S) never holds a kill up.
//   - a stop of dlock that it can catch (SIGTSTP, or Ctrl-Z on its terminal) stops the
//     command's group too; when dlock is continued it checks the lease before it
//     continues the command, and kills the command if the lease ended meanwhile.

// supervisor runs one command under one lease.
type supervisor struct {
	name  string        // the command's name in messages ("run", "elect")
	key   string        // the lock's key, in messages and DLOCK_KEY
	grace time.Duration // --grace: SIGTERM this long before the deadline; 0: the default (graceFor)
	ttl   time.Duration // the lease's TTL (per-lease leases: the default grace is a third of it)
	env   []string      // extra environment of the command

	// Job-runner limits of "dlock run" (0: none), both counted from the command's start.
	atLeast time.Duration // --at-least: hold the lease this long even if the command ends sooner
	atMost  time.Duration // --at-most: SIGTERM the command after this long, SIGKILL after the grace
}

// checkPeriod is how often the supervisor compares the lease's deadline with the
// grace period: the SIGTERM comes at most this late (the SIGKILL comes on time: it
// has a timer of its own).
const checkPeriod = 20 * time.Millisecond

// maxSessionGrace caps the default grace period of a session lease.
const maxSessionGrace = 10 * time.Second

// groupTimeout bounds how long dlock waits for the command's process group to be
// gone after it killed it (a process stuck in the kernel does not die at once).
const groupTimeout = 10 * time.Second

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
	// What the command's processes leave behind when they die comes to dlock, which
	// reaps it (endGroup): a process group is gone only when its zombies are.
	becomeSubreaper()
	if err := child.Start(); err != nil {
		releaseQuietly(lease)
		fmt.Fprintf(os.Stderr, "dlock %s: %v\n", s.name, err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	// Only now: a child started while they are ignored would inherit that.
	signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN)
	notes := newNotes()
	defer notes.close()

	started := time.Now()
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

	w := watch{s: s, lease: lease, pgid: pgid, notes: notes}
	defer w.stopKill()
	tick := time.NewTicker(checkPeriod)
	defer tick.Stop()
	leaseDone := lease.Done()
	var stopSig os.Signal // the last signal passed on that asks the command to stop
	var atMost <-chan time.Time
	if s.atMost > 0 {
		t := time.NewTimer(s.atMost - time.Since(started))
		defer t.Stop()
		atMost = t.C
	}
	for loop := true; loop; {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTSTP {
				stopTogether(pgid, held)
				break
			}
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
			if stops(sig) {
				stopSig = sig
			}
		case <-tick.C:
			w.checkDeadline()
		case <-leaseDone:
			leaseDone = nil
			w.leaseEnded()
		case <-w.killC():
			w.killNow()
		case <-atMost:
			w.timeUp()
		case <-exited:
			loop = false
		}
	}
	// The main process is gone; what it started may not be: nothing may go on working
	// without the lock, so the group is killed — and gone — before the release.
	gone := endGroup(pgid)
	if w.lost || lease.Err() != nil {
		if !w.lost {
			notes.printf("dlock %s: lease on %q ended while the command finished: %v\n", s.name, s.key, lease.Err())
		}
		return exitLost
	}
	if !gone {
		notes.printf("dlock %s: warning: processes of the command's group were still there %v after SIGKILL; releasing %q anyway\n", s.name, groupTimeout, s.key)
	}
	if waitErr != nil {
		releaseQuietly(lease)
		notes.printf("dlock %s: waiting for the command: %v\n", s.name, waitErr)
		return exitSoftware
	}
	code := exitCode(status)
	if w.timedOut {
		code = exitTimedOut
	}
	heldOver := false // a hold-over began with the lock ours when the command finished
	if until := started.Add(s.atLeast); s.atLeast > 0 && time.Now().Before(until) {
		if err := s.confirm(lease); errors.Is(err, dlock.ErrNotHeld) {
			notes.printf("dlock %s: lease on %q was lost before the command finished: %v\n", s.name, s.key, err)
			return exitLost
		}
		if stopSig != nil {
			notes.printf("dlock %s: %v while the command ran: no --at-least hold-over; releasing %q %v before its end\n",
				s.name, stopSig, s.key, time.Until(until).Round(time.Millisecond))
		} else {
			if s.holdOver(lease, until, sigs, notes) {
				return code
			}
			heldOver = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		switch {
		case errors.Is(err, dlock.ErrNotHeld) && heldOver:
			notes.printf("dlock %s: lease on %q was lost during the --at-least hold-over, after the command finished: another run may have started before it ended: %v\n", s.name, s.key, err)
		case errors.Is(err, dlock.ErrNotHeld):
			notes.printf("dlock %s: lease on %q was lost before the command finished: %v\n", s.name, s.key, err)
			return exitLost
		default:
			notes.printf("dlock %s: warning: release of %q failed (it frees itself when its TTL ends): %v\n", s.name, s.key, err)
		}
	}
	return code
}

// confirm asks the store, once the command has finished and before the --at-least
// hold-over, whether the lock is still ours: an ErrNotHeld then means it was lost
// while the command ran. A session lease cannot be refreshed (its loss is reported as
// it is seen, through Done): nil. Any other error is not an answer: nil too, and the
// hold-over watches the lease as usual.
func (s supervisor) confirm(lease dlock.Lease) error {
	if s.ttl <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Refresh(ctx, s.ttl); errors.Is(err, dlock.ErrNotHeld) {
		return err
	}
	return nil
}

// stops reports whether sig asks a job to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT),
// rather than something else of the command (SIGUSR1, SIGUSR2).
func stops(sig os.Signal) bool {
	return sig != syscall.SIGUSR1 && sig != syscall.SIGUSR2 && sig != syscall.SIGTSTP
}

// holdOver keeps the lease (still renewed) until until, after the command finished
// early under --at-least. It returns true if the lease ended meanwhile, which it
// reports: the command's work was done under the lock, but another run may start
// before until. SIGINT, SIGTERM, SIGHUP and SIGQUIT end the hold-over (false: the
// caller releases the lock); SIGTSTP stops dlock; SIGUSR1 and SIGUSR2 are ignored.
func (s supervisor) holdOver(lease dlock.Lease, until time.Time, sigs <-chan os.Signal, notes *notes) bool {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return false
		case <-lease.Done():
			notes.printf("dlock %s: lease on %q lost during the --at-least hold-over, %v before its end, after the command finished: another run may start before then: %v\n",
				s.name, s.key, time.Until(until).Round(time.Millisecond), lease.Err())
			return true
		case sig := <-sigs:
			if sig == syscall.SIGTSTP {
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
			if !stops(sig) {
				continue
			}
			notes.printf("dlock %s: %v during the --at-least hold-over: releasing %q %v before its end\n",
				s.name, sig, s.key, time.Until(until).Round(time.Millisecond))
			return false
		}
	}
}

// watch is the supervisor's view of the lease while the command runs: when to warn
// the command (SIGTERM) and when to kill it (SIGKILL).
type watch struct {
	s     supervisor
	lease dlock.Lease
	pgid  int
	notes *notes

	grace    time.Duration // a session lease's default grace period for the current trouble (0: none yet)
	warned   bool          // SIGTERM sent for the current trouble
	lost     bool          // the lease ended
	timedOut bool          // --at-most ran out: SIGTERM sent, SIGKILL after the grace

	// The SIGKILLs due, by reason ("deadline", "held", "at-most"); the timer is set
	// to the earliest.
	kills   map[string]time.Time
	kill    *time.Timer // SIGKILL at killAt, for killWhy
	killAt  time.Time
	killWhy string
}

// graceFor returns the grace period: --grace, or its default — a third of the TTL for
// a per-lease lease; for a session lease half of what was left before deadline (the
// moment the store may free the lock) when the trouble was first seen, at most 10s.
func (w *watch) graceFor(deadline time.Time) time.Duration {
	switch {
	case w.s.grace > 0:
		return w.s.grace
	case w.s.ttl > 0:
		return w.s.ttl / 3
	case w.grace == 0:
		w.grace = max(min(time.Until(deadline)/2, maxSessionGrace), time.Nanosecond)
	}
	return w.grace
}

// checkDeadline warns the command when less than the grace period is left before
// the lease's deadline, and keeps the SIGKILL timer on that deadline while it moves.
func (w *watch) checkDeadline() {
	if w.lost {
		return
	}
	d, ok := dlock.Deadline(w.lease)
	if !ok {
		w.grace = 0 // a session lease in touch with its store: the next trouble has its own
	}
	if !ok || time.Until(d) >= w.graceFor(d) {
		// Healthy (renewed, or reconnected): a later trouble warns again.
		w.warned = false
		w.cancelKill("deadline")
		return
	}
	if !w.warned {
		w.warned = true
		_ = syscall.Kill(-w.pgid, syscall.SIGTERM)
		what := "renewals of %q are failing"
		if w.s.ttl == 0 {
			what = "the session holding %q is cut off from its store"
		}
		w.notes.printf("dlock %s: "+what+": the lease ends in %v; sent SIGTERM to the command, SIGKILL then\n",
			w.s.name, w.s.key, time.Until(d).Round(time.Millisecond))
	}
	w.armKill(d, "deadline")
}

// leaseEnded decides, once the lease has ended, how the command is stopped.
func (w *watch) leaseEnded() {
	w.lost = true
	err := w.lease.Err()
	var le *dlock.LossError
	if errors.As(err, &le) && time.Now().Before(le.HeldUntil) {
		// Given up by this client while the store keeps the lock until HeldUntil.
		at := time.Now().Add(w.graceFor(le.HeldUntil))
		if le.HeldUntil.Before(at) {
			at = le.HeldUntil
		}
		if !w.warned {
			w.warned = true
			_ = syscall.Kill(-w.pgid, syscall.SIGTERM)
		}
		w.armKill(at, "held")
		w.notes.printf("dlock %s: lease on %q lost: %v; sent SIGTERM to the command, SIGKILL in %v (the store keeps the lock %v more at least)\n",
			w.s.name, w.s.key, err, time.Until(at).Round(time.Millisecond), time.Until(le.HeldUntil).Round(time.Millisecond))
		return
	}
	// The lock may be free already: another holder may be inside.
	_ = syscall.Kill(-w.pgid, syscall.SIGKILL)
	w.stopKill()
	w.notes.printf("dlock %s: lease on %q lost: %v; sent SIGKILL to the command\n", w.s.name, w.s.key, err)
}

// armKill schedules a SIGKILL at at for why: "deadline" (the lease's deadline, which
// moves with it), "held" (after the grace of a loss the client inferred) or
// "at-most" (after the grace of --at-most). Only a deadline moves later; the kill
// comes at the earliest time of all the reasons.
func (w *watch) armKill(at time.Time, why string) {
	if old, ok := w.kills[why]; ok && why != "deadline" && !at.Before(old) {
		return
	}
	if w.kills == nil {
		w.kills = map[string]time.Time{}
	}
	w.kills[why] = at
	w.setKillTimer()
}

// cancelKill calls off the SIGKILL scheduled for why (a trouble that healed).
func (w *watch) cancelKill(why string) {
	if _, ok := w.kills[why]; ok {
		delete(w.kills, why)
		w.setKillTimer()
	}
}

// setKillTimer sets the timer to the earliest SIGKILL scheduled.
func (w *watch) setKillTimer() {
	why, at := "", time.Time{}
	for r, t := range w.kills {
		if why == "" || t.Before(at) {
			why, at = r, t
		}
	}
	if w.kill != nil && w.killWhy == why && w.killAt.Equal(at) {
		return
	}
	if w.kill != nil {
		w.kill.Stop()
		w.kill, w.killAt, w.killWhy = nil, time.Time{}, ""
	}
	if why != "" {
		w.kill, w.killAt, w.killWhy = time.NewTimer(time.Until(at)), at, why
	}
}

// stopKill calls off every SIGKILL scheduled.
func (w *watch) stopKill() {
	w.kills = nil
	w.setKillTimer()
}

// timeUp ends a command that ran --at-most: SIGTERM (unless a trouble of the lease
// sent it already), and SIGKILL after the grace period, as for a loss the client
// inferred.
func (w *watch) timeUp() {
	w.timedOut = true
	if !w.warned {
		w.warned = true
		_ = syscall.Kill(-w.pgid, syscall.SIGTERM)
	}
	grace := w.jobGrace()
	w.armKill(time.Now().Add(grace), "at-most")
	w.notes.printf("dlock %s: the command ran --at-most %v: sent SIGTERM to the command, SIGKILL in %v\n", w.s.name, w.s.atMost, grace)
}

// jobGrace is the time from --at-most's SIGTERM to its SIGKILL: --grace, or by
// default a third of the TTL (per-lease leases) or 10s (session leases).
func (w *watch) jobGrace() time.Duration {
	switch {
	case w.s.grace > 0:
		return w.s.grace
	case w.s.ttl > 0:
		return w.s.ttl / 3
	}
	return maxSessionGrace
}

// killC is the SIGKILL timer's channel (nil when none is set).
func (w *watch) killC() <-chan time.Time {
	if w.kill == nil {
		return nil
	}
	return w.kill.C
}

// killNow sends the SIGKILL its timer was set for: the lease is over (at its
// deadline, or past the grace of a loss), whether or not it has ended yet — or the
// command ran past --at-most and its grace.
func (w *watch) killNow() {
	why := w.killWhy
	w.kill, w.killAt, w.killWhy, w.kills = nil, time.Time{}, "", nil
	_ = syscall.Kill(-w.pgid, syscall.SIGKILL)
	if why != "at-most" {
		w.lost = true
	}
	if why == "deadline" {
		w.notes.printf("dlock %s: the lease on %q reached its deadline; sent SIGKILL to the command\n", w.s.name, w.s.key)
	} else {
		w.notes.printf("dlock %s: the command did not exit after SIGTERM; sent SIGKILL\n", w.s.name)
	}
}

// endGroup kills what is left of the command's process group (pgid) and returns once
// none of it is left: it reaps the processes that came to dlock as their subreaper,
// and waits for the others (at most groupTimeout: false if some were still there).
// Call it only after the command's main process was waited for.
func endGroup(pgid int) bool {
	deadline := time.Now().Add(groupTimeout)
	pause := 50 * time.Microsecond
	for {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // again each time: a member forked meanwhile
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
		if syscall.Kill(-pgid, 0) == syscall.ESRCH {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		// Members that are dying, or on their way to dlock as orphans: the kernel says
		// nothing to a subreaper about a process group's end.
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// becomeSubreaper makes the orphans of the command's processes dlock's children
// (PR_SET_CHILD_SUBREAPER), so that endGroup can reap them: a zombie still counts as
// a member of its process group until its parent reaps it.
func becomeSubreaper() {
	const prSetChildSubreaper = 36
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// notes writes dlock's messages to stderr from a goroutine of its own, so that the
// supervisor never waits on the terminal between a decision and the kill it calls
// for (a terminal stopped with Ctrl-S, a pipe nobody reads).
type notes struct {
	ch   chan string
	done chan struct{}
}

// notesFlush bounds how long dlock waits, before it exits, for its messages to be
// written.
const notesFlush = 2 * time.Second

func newNotes() *notes {
	n := &notes{ch: make(chan string, 64), done: make(chan struct{})}
	go func() {
		defer close(n.done)
		for m := range n.ch {
			_, _ = os.Stderr.WriteString(m)
		}
	}()
	return n
}

// printf queues a message; one that does not fit (64 are waiting) is dropped.
func (n *notes) printf(format string, args ...any) {
	select {
	case n.ch <- fmt.Sprintf(format, args...):
	default:
	}
}

// close waits for the queued messages to be written, at most notesFlush.
func (n *notes) close() {
	close(n.ch)
	t := time.NewTimer(notesFlush)
	defer t.Stop()
	select {
	case <-n.done:
	case <-t.C:
	}
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
