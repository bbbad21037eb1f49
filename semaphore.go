package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// MaxLimit is the largest limit of a Semaphore.
const MaxLimit = 1 << 16

// ErrInvalidLimit: a semaphore's limit is below 1 or above MaxLimit (or above what
// the backend's generic semaphore can hold).
var ErrInvalidLimit = errors.New("dlock: invalid semaphore limit")

// Semaphore is a counting semaphore: at most Limit leases (permits) on its key at
// once, handed out by the backend of the Locker it was made from. A permit is a
// Lease like a mutex's — Key, Token, Refresh, Release, Done, Err — and Acquire takes
// the same options (WithTTL, WithRetry, WithAutoRenew, WithObserver). Safe for
// concurrent use; a Semaphore holds no state of its own, so any number of them (in
// any number of processes) may share a key.
//
// A key's semaphore is not its mutex: the store keeps them apart, and they never
// exclude each other. A semaphore and a read-write lock on one key conflict: the
// second kind to come gets ErrConflict while the first is held. So does a semaphore
// with another limit while the key has holders: two clients never silently work
// with two limits. Where a backend cannot tell (the generic semaphore), its
// declaration says so (spec.SemaphoreConflict is then a weakness).
//
// What is not guaranteed: as for the mutex, a permit holder paused past its TTL
// keeps running while another takes its permit; the backend's declaration
// (spec.Capabilities.Semaphore) says whether permits are fenced and served in order.
type Semaphore struct {
	c     *locker
	obs   Observer
	key   string
	limit int
	try   func(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error)
	wait  func(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error)
}

// NewSemaphore returns the semaphore named key with limit permits on l's backend.
// l must come from a backend's constructor or Open (wrapped by Instrument or not:
// the Instrument's Observer sees the semaphore's calls too). It returns an error
// wrapping errors.ErrUnsupported when the backend has no semaphores (its
// declaration has none), ErrInvalidKey for a bad key and ErrInvalidLimit for a
// limit below 1 or above MaxLimit. It does not contact the store.
func NewSemaphore(l Locker, key string, limit int) (*Semaphore, error) {
	c, obs, err := primitiveCore(l, "semaphores")
	if err != nil {
		return nil, err
	}
	s, ok := c.d.(driver.Semaphorer)
	if !ok {
		return nil, fmt.Errorf("dlock: the %s backend has no semaphores: %w", c.info.Name, errors.ErrUnsupported)
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := validateLimit(limit); err != nil {
		return nil, err
	}
	sem := &Semaphore{c: c, obs: obs, key: key, limit: limit, try: s.TryLockSemaphore}
	if w, ok := c.d.(driver.SemaphoreWaiter); ok {
		sem.wait = w.LockSemaphore
	}
	return sem, nil
}

// validateLimit returns nil for a usable semaphore limit (1..MaxLimit) and an error
// wrapping ErrInvalidLimit otherwise.
func validateLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fmt.Errorf("%w: %d (want 1 to %d)", ErrInvalidLimit, limit, MaxLimit)
	}
	return nil
}

// primitiveCore finds the Locker New made under l, for a primitive named what.
func primitiveCore(l Locker, what string) (*locker, Observer, error) {
	c, obs, ok := core(l)
	if !ok {
		return nil, nil, fmt.Errorf("dlock: %T is not a Locker made by dlock.New (nor wraps one with Unwrap): no %s: %w", l, what, errors.ErrUnsupported)
	}
	return c, obs, nil
}

// Key is the semaphore's name.
func (s *Semaphore) Key() string { return s.key }

// Limit is the number of permits.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire blocks until it holds one of the semaphore's permits, ctx is done, or the
// backend fails. Errors are those of Locker.Acquire, plus ErrConflict when the key
// is held as a read-write lock or as a semaphore with another limit (no wait then).
// On a backend that queues waiters (its declaration says FIFO), Acquire without
// WithRetry waits in that queue.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (Lease, error) {
	return s.c.acquire(ctx, s.request(), true, withObserver(s.obs, opts))
}

// TryAcquire makes one attempt: ErrNotAcquired when every permit is held (or, on a
// queueing backend, when others wait). Other errors are as for Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (Lease, error) {
	return s.c.acquire(ctx, s.request(), false, withObserver(s.obs, opts))
}

func (s *Semaphore) request() request {
	r := request{key: s.key, wake: driver.SemaphoreWake(s.key),
		try: func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return s.try(ctx, s.key, s.limit, ttl)
		}}
	if s.wait != nil {
		r.wait = func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return s.wait(ctx, s.key, s.limit, ttl)
		}
	}
	return r
}

// withObserver puts the Instrument's Observer (if any) before the call's options,
// as Instrument does for the mutex.
func withObserver(obs Observer, opts []Option) []Option {
	if obs == nil {
		return opts
	}
	return append([]Option{WithObserver(obs)}, opts...)
}
