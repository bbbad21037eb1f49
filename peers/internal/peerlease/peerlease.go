// Package peerlease is the bookkeeping the peer adapters share: input validation, the
// set of a client's open leases, Close, and the one Lease type whose Done and Err follow
// what the adapted library reports. The adapters do not use dlock.New: each library
// acquires, waits and retries in its own way, and that is what is being compared.
package peerlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// closeTimeout bounds how long Close waits for the releases of the leases it ends.
const closeTimeout = 2 * time.Second

// Hooks are the library calls behind one lease.
type Hooks struct {
	// Release gives the lock up through the library: nil, an error wrapping
	// dlock.ErrNotHeld when the library says the lock was not ours, or a backend error.
	Release func(ctx context.Context) error
	// Refresh extends the lock to ttl through the library and returns the validity the
	// library reports (zero when it reports none). Nil when the library cannot refresh.
	Refresh func(ctx context.Context, ttl time.Duration) (until time.Time, err error)
}

// Set is one client's leases. The zero value is not usable; call NewSet.
type Set struct {
	name string

	mu     sync.Mutex
	closed bool
	leases map[*Lease]struct{}
}

// NewSet returns an empty Set for the peer called name (in errors).
func NewSet(name string) *Set { return &Set{name: name, leases: map[*Lease]struct{}{}} }

// Begin checks one Acquire or TryAcquire call: the key (dlock.ValidateKey), the TTL
// (dlock.DefaultTTL when unset, dlock.ValidateTTL) and that the client is open.
func (s *Set) Begin(key string, opts []dlock.Option) (dlock.AcquireOptions, error) {
	o := dlock.ApplyOptions(opts...)
	if o.TTL == 0 {
		o.TTL = dlock.DefaultTTL
	}
	if err := dlock.ValidateKey(key); err != nil {
		return o, err
	}
	if err := dlock.ValidateTTL(o.TTL); err != nil {
		return o, err
	}
	if s.Closed() {
		return o, dlock.ErrClosed
	}
	return o, nil
}

// Closed reports whether Close has begun.
func (s *Set) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// NotAcquired is the error of an acquire that did not get the lock: cause (the
// library's error, may be nil) with ctx's error joined when ctx has ended.
func (s *Set) NotAcquired(ctx context.Context, key string, cause error) error {
	switch {
	case ctx.Err() != nil && cause != nil && !errors.Is(cause, ctx.Err()):
		return fmt.Errorf("%w: %q (%s): %w (%w)", dlock.ErrNotAcquired, key, s.name, ctx.Err(), cause)
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %q (%s): %w", dlock.ErrNotAcquired, key, s.name, ctx.Err())
	case cause != nil:
		return fmt.Errorf("%w: %q (%s): %w", dlock.ErrNotAcquired, key, s.name, cause)
	}
	return fmt.Errorf("%w: %q is held (%s)", dlock.ErrNotAcquired, key, s.name)
}

// Failed wraps a backend error of an acquire.
func (s *Set) Failed(key string, err error) error {
	return fmt.Errorf("dlock: %s: acquire %q: %w", s.name, key, err)
}

// Grant turns a lock the library granted into a Lease. until is the validity the
// library reports (zero: none, the lease lasts until released or lost); with
// o.AutoRenew and a Refresh hook the lease is refreshed every TTL/3. If the client
// closed meanwhile, the lock is released and Grant returns dlock.ErrClosed.
func (s *Set) Grant(key string, token uint64, until time.Time, o dlock.AcquireOptions, h Hooks) (*Lease, error) {
	ls := &Lease{set: s, key: key, token: token, h: h, ttl: o.TTL, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = h.Release(ctx)
		return nil, dlock.ErrClosed
	}
	s.leases[ls] = struct{}{}
	s.mu.Unlock()
	if !until.IsZero() {
		ls.mu.Lock()
		ls.until = until
		ls.timer = time.AfterFunc(time.Until(until), ls.expire)
		ls.mu.Unlock()
		if o.AutoRenew && h.Refresh != nil {
			ls.autoRenew = true
			go ls.renewLoop()
		}
	}
	return ls, nil
}

// Lose ends every open lease with dlock.ErrLost wrapping cause: the library reported
// that the session holding them is gone.
func (s *Set) Lose(cause error) {
	for _, ls := range s.open() {
		ls.end(fmt.Errorf("%w: %w", dlock.ErrLost, cause))
	}
}

func (s *Set) open() []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Lease, 0, len(s.leases))
	for ls := range s.leases {
		out = append(out, ls)
	}
	return out
}

// Close marks the client closed (later Begin calls return dlock.ErrClosed), releases
// every open lease through the library (best effort, a bounded wait) and ends it with
// dlock.ErrClosed. It reports whether this call closed the Set (false if it was
// closed already); the adapter then closes what it owns.
func (s *Set) Close() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, ls := range s.open() {
		wg.Go(func() { ls.closeRelease(ctx) })
	}
	wg.Wait()
	return true
}

func (s *Set) forget(ls *Lease) {
	s.mu.Lock()
	delete(s.leases, ls)
	s.mu.Unlock()
}

// Lease is one grant by a peer library. Safe for concurrent use.
type Lease struct {
	set   *Set
	key   string
	token uint64
	h     Hooks

	op sync.Mutex // serializes Refresh, Release and renewals

	mu        sync.Mutex // guards the fields below
	ttl       time.Duration
	until     time.Time // zero: no validity known
	timer     *time.Timer
	autoRenew bool
	err       error
	done      chan struct{}
}

// Key is the lock's name as given to Acquire.
func (ls *Lease) Key() string { return ls.key }

// Token is the fencing value the library exposes, 0 if none.
func (ls *Lease) Token() uint64 { return ls.token }

// Done is closed when the lease ended: released, closed, past the validity the
// library reported, or lost as the library reported.
func (ls *Lease) Done() <-chan struct{} {
	ls.checkValidity()
	return ls.done
}

// Err is nil while the lease is held, then says why Done closed.
func (ls *Lease) Err() error {
	ls.checkValidity()
	return ls.reason()
}

func (ls *Lease) reason() error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.err
}

// checkValidity ends the lease if its validity has passed, so that a holder that
// looks never sees it valid past the validity, however late the timer runs.
func (ls *Lease) checkValidity() {
	ls.mu.Lock()
	past := ls.err == nil && !ls.until.IsZero() && !time.Now().Before(ls.until)
	ls.mu.Unlock()
	if past {
		ls.expire()
	}
}

func (ls *Lease) end(reason error) {
	ls.mu.Lock()
	if ls.err != nil {
		ls.mu.Unlock()
		return
	}
	ls.err = reason
	if ls.timer != nil {
		ls.timer.Stop()
	}
	close(ls.done)
	ls.mu.Unlock()
	ls.set.forget(ls)
}

func (ls *Lease) expire() {
	ls.mu.Lock()
	early := time.Now().Before(ls.until) // a refresh moved the validity after the timer fired
	auto := ls.autoRenew
	ls.mu.Unlock()
	switch {
	case early:
	case auto:
		ls.end(fmt.Errorf("%w: no renewal succeeded before the validity the library reported", dlock.ErrLost))
	default:
		ls.end(dlock.ErrExpired)
	}
}

func (ls *Lease) notHeld() error {
	return fmt.Errorf("%w: %q (%s: %w)", dlock.ErrNotHeld, ls.key, ls.set.name, ls.Err())
}

// Refresh extends the lease through the library. It returns errors.ErrUnsupported
// when the library cannot refresh, dlock.ErrInvalidTTL for ttl <= 0, dlock.ErrNotHeld
// when the lease ended or the library says the lock is no longer ours (Done then
// closes with ErrLost), and backend errors (the lease is then unchanged).
func (ls *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := dlock.ValidateTTL(ttl); err != nil {
		return err
	}
	if ls.h.Refresh == nil {
		return fmt.Errorf("dlock: %s: the lock lasts as long as the session; Refresh: %w", ls.set.name, errors.ErrUnsupported)
	}
	ls.op.Lock()
	defer ls.op.Unlock()
	return ls.refresh(ctx, ttl)
}

// refresh runs with ls.op held.
func (ls *Lease) refresh(ctx context.Context, ttl time.Duration) error {
	if ls.Err() != nil {
		return ls.notHeld()
	}
	until, err := ls.h.Refresh(ctx, ttl)
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		ls.end(fmt.Errorf("%w: refresh found the lock gone", dlock.ErrLost))
		return ls.notHeld()
	case err != nil:
		return fmt.Errorf("dlock: %s: refresh %q: %w", ls.set.name, ls.key, err)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.err != nil {
		return fmt.Errorf("%w: %q (%s: %w)", dlock.ErrNotHeld, ls.key, ls.set.name, ls.err)
	}
	ls.ttl = ttl
	if !until.IsZero() && ls.timer != nil {
		ls.until = until
		ls.timer.Reset(time.Until(until))
	}
	return nil
}

func (ls *Lease) renewLoop() {
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
		ttl, until := ls.ttl, ls.until
		ls.mu.Unlock()
		ctx, cancel := context.WithDeadline(context.Background(), until)
		ls.op.Lock()
		err := ls.refresh(ctx, ttl)
		ls.op.Unlock()
		cancel()
		switch {
		case err == nil:
			t.Reset(ttl / 3)
		case errors.Is(err, dlock.ErrNotHeld):
			return
		default: // transient: the validity timer ends the lease if no renewal succeeds
			t.Reset(max(ttl/12, time.Millisecond))
		}
	}
}

// Release gives the lock up through the library. It returns dlock.ErrNotHeld when the
// lease had ended (after an expiry the library is still asked to free the lock, in
// case it is still there) or the library says the lock was not ours, and backend
// errors (the lease is then unchanged; Release may be retried).
func (ls *Lease) Release(ctx context.Context) error {
	ls.op.Lock()
	defer ls.op.Unlock()
	if reason := ls.Err(); reason != nil {
		if errors.Is(reason, dlock.ErrExpired) {
			_ = ls.h.Release(ctx)
		}
		return ls.notHeld()
	}
	err := ls.h.Release(ctx)
	switch {
	case err == nil:
		ls.end(dlock.ErrReleased)
		return nil
	case errors.Is(err, dlock.ErrNotHeld):
		ls.end(fmt.Errorf("%w: release found the lock gone: %w", dlock.ErrLost, err))
		return ls.notHeld()
	}
	return fmt.Errorf("dlock: %s: release %q: %w", ls.set.name, ls.key, err)
}

func (ls *Lease) closeRelease(ctx context.Context) {
	ls.op.Lock()
	defer ls.op.Unlock()
	if ls.Err() != nil {
		return
	}
	_ = ls.h.Release(ctx)
	ls.end(dlock.ErrClosed)
}

// String describes the lease for logs.
func (ls *Lease) String() string {
	return fmt.Sprintf("lease(%s %q token %d)", ls.set.name, ls.key, ls.token)
}
