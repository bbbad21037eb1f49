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
	err         error
	done        chan struct{}
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

// Deadline is the lease's local validity deadline (see Deadline).
func (ls *lease) Deadline() (time.Time, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline, !ls.deadline.IsZero()
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
	if ls.timer != nil {
		ls.timer.Stop()
	}
	ls.mu.Unlock()
	ls.l.forget(ls)
	if ls.obs != nil {
		ls.obs.Observe(Event{Kind: EventEnd, Backend: ls.l.info.Name, Key: ls.key, Duration: time.Since(ls.granted), Err: reason})
	}
	// Last: whoever waits on Done finds the Observer (metrics) already told.
	close(ls.done)
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
		ls.end(fmt.Errorf("%w: renewals did not succeed before the validity deadline", ErrLost))
		return
	}
	ls.end(ErrExpired)
}

func (ls *lease) watchSession(s driver.Sessioned) {
	select {
	case <-s.Lost():
		if c := s.Cause(); c != nil {
			ls.end(fmt.Errorf("%w: %w", ErrLost, c))
		} else {
			ls.end(ErrLost)
		}
	case <-ls.done:
	}
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
	return ls.refresh(ctx, ttl)
}

// refresh extends the lease; the caller holds the operation slot.
func (ls *lease) refresh(ctx context.Context, ttl time.Duration) error {
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
		ls.end(fmt.Errorf("%w: refresh found the lock gone", ErrLost))
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
		if errors.Is(reason, ErrExpired) {
			// Past the local deadline the lock may still be ours on the server: free it
			// for the next owner (owner-checked, so harmless if it is not ours), but
			// do not claim we still held it.
			_ = ls.lk.Unlock(ctx)
		}
		return ls.notHeld()
	}
	err := ls.lk.Unlock(ctx)
	switch {
	case err == nil:
		ls.end(ErrReleased)
		return nil
	case errors.Is(err, ErrNotHeld):
		ls.end(fmt.Errorf("%w: release found the lock gone", ErrLost))
		return ls.notHeld()
	}
	return fmt.Errorf("dlock: %s: release %q: %w", ls.l.info.Name, ls.key, err)
}

// closeRelease gives the lock up because the Locker is closing: released if the
// store answers within ctx, ended with ErrClosed either way.
func (ls *lease) closeRelease(ctx context.Context) {
	ls.cancelRenewal()
	if err := ls.acquireOp(ctx); err != nil {
		ls.end(ErrClosed)
		return
	}
	defer ls.releaseOp()
	if done, _ := ls.ended(); !done {
		_ = ls.lk.Unlock(ctx)
	}
	ls.end(ErrClosed)
}
