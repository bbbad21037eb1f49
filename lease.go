package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// lease is the one Lease implementation: every Locker built with New hands it out,
// the backends' and the peers' alike.
//
// Its operations on the store (Refresh, Release, a renewal, the release by Close)
// take turns through op, a one-slot semaphore taken with the caller's context, so
// that Release and Close honour their own context even while a renewal is in flight
// (they also cancel it). Its end — released, expired, lost, closed — is decided once
// under mu and never waits for the store: the validity deadline ends it on time
// whatever the store does.
type lease struct {
	l       *locker
	key     string
	lk      driver.Lock
	token   uint64
	obs     Observer
	granted time.Time

	op chan struct{} // one slot: held by the operation talking to the store

	mu          sync.Mutex // guards the fields below
	ttl         time.Duration
	deadline    time.Time // zero for session leases
	timer       *time.Timer
	autoRenew   bool
	renewCancel context.CancelFunc // cancels the renewal in flight, if any
	// releaseUnsure: a Release failed without the store's answer (it may have
	// freed the lock).
	releaseUnsure bool
	err           error
	endedAt       time.Time // when the lease ended (zero while held)
	done          chan struct{}
}

func newLease(l *locker, key string, lk driver.Lock, ttl time.Duration, obs Observer) *lease {
	return &lease{l: l, key: key, lk: lk, token: lk.Token(), ttl: ttl, obs: obs,
		granted: time.Now(), op: make(chan struct{}, 1), done: make(chan struct{})}
}

// start arms the deadline timer, the renewals and the session watch of a lease
// just granted.
func (ls *lease) start(autoRenew bool) {
	if !ls.l.info.SessionTTL {
		ls.mu.Lock()
		ls.timer = time.AfterFunc(time.Until(ls.deadline), ls.expire)
		ls.autoRenew = autoRenew
		ls.mu.Unlock()
		if autoRenew {
			go ls.renewLoop()
		}
	}
	if s, ok := ls.lk.(driver.Sessioned); ok {
		go ls.watchSession(s)
	}
}

func (ls *lease) Key() string           { return ls.key }
func (ls *lease) Token() uint64         { return ls.token }
func (ls *lease) Done() <-chan struct{} { ls.checkDeadline(); return ls.done }
func (ls *lease) Err() error {
	ls.checkDeadline()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.err
}
func (ls *lease) String() string {
	return fmt.Sprintf("lease(%s %q token %d)", ls.l.info.Name, ls.key, ls.token)
}

// Deadline is the lease's local validity deadline or, for a session lease whose
// client is cut off from its store, the session's (see Deadline).
func (ls *lease) Deadline() (time.Time, bool) {
	ls.mu.Lock()
	d := ls.deadline
	ls.mu.Unlock()
	if !d.IsZero() {
		return d, true
	}
	if sd, ok := ls.lk.(driver.SessionDeadline); ok {
		return sd.SessionDeadline()
	}
	return time.Time{}, false
}

// ended reports whether the lease has ended and why.
func (ls *lease) ended() (bool, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.err != nil, ls.err
}

// acquireOp takes the operation slot, or gives up when ctx ends first.
func (ls *lease) acquireOp(ctx context.Context) error {
	select {
	case ls.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (ls *lease) releaseOp() { <-ls.op }

// cancelRenewal makes a renewal in flight give way (to Release or Close).
func (ls *lease) cancelRenewal() {
	ls.mu.Lock()
	cancel := ls.renewCancel
	ls.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// end ends the lease once with reason; later calls do nothing.
func (ls *lease) end(reason error) {
	ls.mu.Lock()
	if ls.err != nil {
		ls.mu.Unlock()
		return
	}
	ls.err = reason
	ls.endedAt = time.Now()
	if !ls.deadline.IsZero() && ls.deadline.Before(ls.endedAt) {
		ls.endedAt = ls.deadline // never valid past it, however late its timer ran
	}
	if ls.timer != nil {
		ls.timer.Stop()
	}
	cancel := ls.renewCancel // a renewal in flight has nothing left to renew
	ls.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	ls.l.forget(ls)
	if ls.obs != nil {
		var cause Cause
		if le, ok := reason.(*LossError); ok {
			cause = le.Cause
		}
		ls.obs.Observe(Event{Kind: EventEnd, Backend: ls.l.info.Name, Key: ls.key, Duration: time.Since(ls.granted), Err: reason, Cause: cause})
	}
	// Last: whoever waits on Done finds the Observer (metrics) already told.
	close(ls.done)
}

// EndedAt reports when the lease ended: the moment Done closed or, for a lease that
// outlived its validity deadline before its timer ran (a busy machine), the deadline,
// since no look at the lease sees it valid past it. It is zero while the lease is
// held. Lease values from every Locker of this package (backends and peers alike)
// have it; reach it with an interface assertion:
//
//	if e, ok := lease.(interface{ EndedAt() time.Time }); ok { … }
func (ls *lease) EndedAt() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.endedAt
}

// checkDeadline ends the lease if its validity deadline has passed, so that a
// holder that looks (Done, Err, Release) never sees a lease as valid past its
// deadline, however late the deadline timer runs on a busy machine.
func (ls *lease) checkDeadline() {
	ls.mu.Lock()
	past := ls.err == nil && !ls.deadline.IsZero() && !time.Now().Before(ls.deadline)
	ls.mu.Unlock()
	if past {
		ls.expire()
	}
}

// expire runs when the local validity deadline passes.
func (ls *lease) expire() {
	ls.mu.Lock()
	early := time.Now().Before(ls.deadline) // a refresh moved the deadline after the timer fired
	auto := ls.autoRenew
	ls.mu.Unlock()
	if early {
		return
	}
	if auto {
		ls.end(&LossError{Cause: CauseUnreachable, Err: errRenewalsFailed})
		return
	}
	ls.end(&LossError{Cause: CauseExpired})
}

var errRenewalsFailed = errors.New("renewals did not succeed before the validity deadline")

func (ls *lease) watchSession(s driver.Sessioned) {
	select {
	case <-s.Lost():
		ls.end(ls.sessionLoss(s))
	case <-ls.done:
	}
}

// sessionLoss is the loss a session lock reported.
func (ls *lease) sessionLoss(s driver.Sessioned) *LossError {
	ls.mu.Lock()
	auto := ls.autoRenew
	ls.mu.Unlock()
	return lossOf(s.Cause(), auto)
}

// goneCause is why a lease ended whose Release or Refresh found the lock gone (what
// says which): the loss its session lock reported, when it did — the report and the
// call can cross, and the call must not turn a lost connection into a refusal —
// else CauseRefused.
func (ls *lease) goneCause(what string) *LossError {
	if s, ok := ls.lk.(driver.Sessioned); ok {
		select {
		case <-s.Lost():
			return ls.sessionLoss(s)
		default:
		}
	}
	return &LossError{Cause: CauseRefused, Err: errors.New(what)}
}

func (ls *lease) notHeld() error {
	_, reason := ls.ended()
	return fmt.Errorf("%w: %q (%w)", ErrNotHeld, ls.key, reason)
}

func (ls *lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if ls.l.info.SessionTTL {
		return fmt.Errorf("dlock: %s: leases last as long as the session; Refresh: %w", ls.l.info.Name, errors.ErrUnsupported)
	}
	if err := ls.l.checkTTL(ttl); err != nil {
		return err
	}
	ls.checkDeadline()
	if err := ls.acquireOp(ctx); err != nil {
		return fmt.Errorf("dlock: %s: refresh %q: %w", ls.l.info.Name, ls.key, err)
	}
	defer ls.releaseOp()
	if !ls.l.enter() { // the Locker is closing: it gives the lease up
		return fmt.Errorf("%w: %q (%w)", ErrNotHeld, ls.key, ErrClosed)
	}
	defer ls.l.leave()
	return ls.refresh(ctx, ttl)
}

// refresh extends the lease; the caller holds the operation slot.
func (ls *lease) refresh(ctx context.Context, ttl time.Duration) error {
	// A renewal that starts past the deadline (its timer ran late, or the deadline
	// timer has not run yet on a busy machine) finds the lease ended by the
	// deadline: the driver is not asked, and a store that no longer holds the lock
	// is not taken for a refusal (CauseRefused) when the lease had run out first.
	ls.checkDeadline()
	if done, _ := ls.ended(); done {
		return ls.notHeld()
	}
	t0 := time.Now()
	err := ls.lk.Refresh(ctx, ttl)
	if ls.obs != nil {
		ls.obs.Observe(Event{Kind: EventRenew, Backend: ls.l.info.Name, Key: ls.key, Duration: time.Since(t0), Err: err})
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld):
		ls.mu.Lock()
		unsure := ls.releaseUnsure
		ls.mu.Unlock()
		if unsure {
			// A Release whose answer did not come may have gone through: where the
			// store's release is idempotent for its owner (Redis's tombstone) it says
			// so again, and the owner released the lock; it was not lost. No answer
			// again: nothing is known yet.
			switch uerr := ls.lk.Unlock(ctx); {
			case uerr == nil:
				ls.end(ErrReleased)
				return ls.notHeld()
			case !errors.Is(uerr, ErrNotHeld):
				return fmt.Errorf("dlock: %s: refresh %q found the lock gone after a release without an answer; asking again: %w", ls.l.info.Name, ls.key, uerr)
			}
		}
		ls.end(ls.goneCause("refresh found the lock gone"))
		return ls.notHeld()
	case errors.Is(err, errors.ErrUnsupported):
		return fmt.Errorf("dlock: %s: Refresh: %w", ls.l.info.Name, err)
	default:
		return fmt.Errorf("dlock: %s: refresh %q: %w", ls.l.info.Name, ls.key, err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.err != nil { // the deadline passed while the refresh was on its way
		return fmt.Errorf("%w: %q (%w)", ErrNotHeld, ls.key, ls.err)
	}
	deadline := t0.Add(ttl - ls.l.info.Drift(ttl))
	if !time.Now().Before(deadline) {
		return fmt.Errorf("dlock: %s: refresh %q took longer than the ttl %v", ls.l.info.Name, ls.key, ttl)
	}
	ls.ttl = ttl
	ls.deadline = deadline
	ls.timer.Reset(time.Until(deadline))
	return nil
}

// renewLoop refreshes the lease every TTL/3 until it ends. Each renewal is bounded
// by half the validity it has left, so that a store that does not answer is asked
// again before the deadline, and never past it; Release and Close cancel a renewal
// in flight. When no renewal succeeds by the deadline, the deadline timer ends the
// lease with ErrLost.
func (ls *lease) renewLoop() {
	ls.mu.Lock()
	interval := ls.ttl / 3
	ls.mu.Unlock()
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ls.done:
			return
		case <-t.C:
		}
		ls.mu.Lock()
		ttl, remaining := ls.ttl, time.Until(ls.deadline)
		ctx, cancel := context.WithTimeout(context.Background(), max(remaining/2, 0))
		ls.renewCancel = cancel
		ls.mu.Unlock()
		// Not a call Close waits for: Close cancels it and gives the lease up itself.
		err := ls.acquireOp(ctx)
		if err == nil {
			err = ls.refresh(ctx, ttl)
			ls.releaseOp()
		}
		ls.mu.Lock()
		ls.renewCancel = nil
		ls.mu.Unlock()
		cancel()
		switch {
		case err == nil:
			t.Reset(ttl / 3)
		case errors.Is(err, ErrNotHeld):
			return
		default: // transient: try again soon; the deadline timer ends the lease if none succeeds
			t.Reset(max(ttl/12, time.Millisecond))
		}
	}
}

func (ls *lease) Release(ctx context.Context) error {
	ls.checkDeadline()
	ls.cancelRenewal()
	if err := ls.acquireOp(ctx); err != nil {
		return fmt.Errorf("dlock: %s: release %q: %w", ls.l.info.Name, ls.key, err)
	}
	defer ls.releaseOp()
	if done, reason := ls.ended(); done {
		if errors.Is(reason, ErrExpired) && ls.l.enter() {
			// Past the local deadline the lock may still be ours on the server: free it
			// for the next owner (owner-checked, so harmless if it is not ours), but
			// do not claim we still held it.
			_ = ls.lk.Unlock(ctx)
			ls.l.leave()
		}
		return ls.notHeld()
	}
	if !ls.l.enter() { // the Locker is closing: Close releases the lease
		return fmt.Errorf("dlock: %s: release %q: %w", ls.l.info.Name, ls.key, ErrClosed)
	}
	defer ls.l.leave()
	err := ls.lk.Unlock(ctx)
	switch {
	case err == nil:
		ls.end(ErrReleased)
		if _, reason := ls.ended(); reason != ErrReleased {
			// The lease ended (its deadline passed, Close gave it up) while the release
			// was on its way: Done closed with that reason, and Release says so too,
			// as Refresh does. The store has freed the lock all the same.
			return fmt.Errorf("%w: %q (%w)", ErrNotHeld, ls.key, reason)
		}
		return nil
	case errors.Is(err, ErrNotHeld):
		ls.end(ls.goneCause("release found the lock gone"))
		return ls.notHeld()
	}
	// The release may have gone through with its answer lost: a renewal that then
	// finds the lock gone asks the store again before it calls it a loss.
	ls.mu.Lock()
	ls.releaseUnsure = true
	ls.mu.Unlock()
	return fmt.Errorf("dlock: %s: release %q: %w", ls.l.info.Name, ls.key, err)
}

// closeRelease gives the lock up because the Locker is closing: released if the
// store answers within ctx, ended with ErrClosed either way.
//
// The lease ends first, then the store frees the lock: Done is closed before
// another client can be granted it, so that a holder watching Done never acts
// on a lease the store has handed on.
func (ls *lease) closeRelease(ctx context.Context) {
	ls.cancelRenewal()
	gone, _ := ls.ended()
	ls.end(ErrClosed)
	if err := ls.acquireOp(ctx); err != nil {
		return
	}
	defer ls.releaseOp()
	if !gone {
		_ = ls.lk.Unlock(ctx)
	}
}
