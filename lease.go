package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// lease is the one Lease implementation behind every backend built with New.
type lease struct {
	l       *locker
	key     string
	lk      driver.Lock
	token   uint64
	obs     Observer
	granted time.Time

	op sync.Mutex // serializes Refresh, Release and renewals

	mu        sync.Mutex // guards the fields below
	ttl       time.Duration
	deadline  time.Time // zero for session leases
	timer     *time.Timer
	autoRenew bool
	err       error
	done      chan struct{}
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
func (ls *lease) ended() (bool, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.err != nil, ls.err
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
// holder that looks (Done, Err) never sees a lease as valid past its deadline,
// however late the deadline timer runs on a busy machine.
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
	if ttl < ls.l.info.MinTTL {
		return fmt.Errorf("%w: %v is below the %s backend's minimum of %v", ErrInvalidTTL, ttl, ls.l.info.Name, ls.l.info.MinTTL)
	}
	if d := ls.l.info.Drift(ttl); ttl <= d {
		return fmt.Errorf("%w: %v leaves no validity after the %v clock-drift allowance (%s)", ErrInvalidTTL, ttl, d, ls.l.info.Name)
	}
	ls.op.Lock()
	defer ls.op.Unlock()
	return ls.refresh(ctx, ttl)
}

// refresh extends the lease; the caller holds ls.op.
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
		ttl, deadline := ls.ttl, ls.deadline
		ls.mu.Unlock()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		ls.op.Lock()
		err := ls.refresh(ctx, ttl)
		ls.op.Unlock()
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
	ls.op.Lock()
	defer ls.op.Unlock()
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

// closeRelease gives the lock up because the Locker is closing.
func (ls *lease) closeRelease(ctx context.Context) {
	ls.op.Lock()
	defer ls.op.Unlock()
	if done, _ := ls.ended(); done {
		return
	}
	_ = ls.lk.Unlock(ctx)
	ls.end(ErrClosed)
}
