// Package bsmpeer presents github.com/bsm/redislock (v0.9.4) as a dlock.Locker, so
// that the conformance suite, the fault scenarios and the benchmarks run on it beside
// dlock's own backends.
//
// The library is driven as a dlock driver (package driver) and runs under dlock.New
// like every backend, so its leases are dlock's own (validity deadline, auto-renewal,
// Done/Err, Observer events). TryAcquire is one call of redislock's Client.Obtain (SET
// NX PX in a Lua script) with no retry; Acquire is Obtain with redislock's own retry
// loop — redislock.ExponentialBackoff(1ms, 250ms), the bounds of dlock.DefaultRetry —
// unless the caller passes dlock.WithRetry, which dlock then runs over single Obtains.
// Release is Lock.Release and Refresh is Lock.Refresh, both owner-checked by the
// lock's random token.
//
// What redislock does not give: fencing (Token is 0), wake-ups on release (waiters
// poll), and a validity: Obtain and Refresh report none, so dlock keeps it as for its
// own backends, the TTL counted from the start of the request that set it less
// driver.StandardDrift (1% + 2ms). When ctx has no deadline, redislock itself bounds
// Obtain to the TTL: Acquire then gives up after one TTL with ErrNotAcquired.
package bsmpeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bsm/redislock"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Name is the peer's name in errors.
const Name = "bsm/redislock"

// New returns a Locker that takes locks with redislock on client (a *redis.Client or
// any redislock.RedisClient). Close releases the leases still held but does not close
// client.
func New(client redislock.RedisClient) dlock.Locker {
	return dlock.New(&bsmDriver{c: redislock.New(client)}, driver.Info{Name: Name})
}

type bsmDriver struct{ c *redislock.Client }

var _ driver.Waiter = (*bsmDriver)(nil)

// TryLock is one Obtain.
func (d *bsmDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.obtain(ctx, key, ttl, nil)
}

// Lock is Obtain with redislock's own retry loop.
func (d *bsmDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	s := &strategy{s: redislock.ExponentialBackoff(time.Millisecond, 250*time.Millisecond)}
	return d.obtain(ctx, key, ttl, s)
}

func (d *bsmDriver) obtain(ctx context.Context, key string, ttl time.Duration, s *strategy) (driver.Lock, error) {
	var o *redislock.Options
	if s != nil {
		o = &redislock.Options{RetryStrategy: s}
	}
	lk, err := d.c.Obtain(ctx, key, ttl, o)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
	case errors.Is(err, redislock.ErrNotObtained) && s == nil:
		return nil, driver.Busy(0)
	case errors.Is(err, redislock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded):
		// redislock's own deadline of one TTL for a ctx without one.
		return nil, fmt.Errorf("%w: redislock gave up after the ttl %v", driver.Busy(0), ttl)
	default:
		return nil, err
	}
	l := &bsmLock{lk: lk}
	if s != nil {
		l.validFrom = s.lastTry()
	}
	return l, nil
}

func (d *bsmDriver) Close() error { return nil }

// strategy is redislock's retry strategy that also notes when the next attempt can
// start at the earliest: the moment it returns plus the delay it returns. The last
// such moment before a grant is a lower bound of when the store set the lock's TTL.
type strategy struct {
	s        redislock.RetryStrategy
	mu       sync.Mutex
	earliest time.Time
}

func (s *strategy) NextBackoff() time.Duration {
	d := s.s.NextBackoff()
	s.mu.Lock()
	s.earliest = time.Now().Add(d)
	s.mu.Unlock()
	return d
}

func (s *strategy) lastTry() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.earliest
}

// bsmLock is one lock obtained by redislock.
type bsmLock struct {
	lk        *redislock.Lock
	validFrom time.Time // zero when granted by the first attempt
}

func (l *bsmLock) Token() uint64        { return 0 }
func (l *bsmLock) ValidFrom() time.Time { return l.validFrom }

func (l *bsmLock) Refresh(ctx context.Context, ttl time.Duration) error {
	return notHeld(l.lk.Refresh(ctx, ttl, nil))
}

func (l *bsmLock) Unlock(ctx context.Context) error { return notHeld(l.lk.Release(ctx)) }

// notHeld maps redislock's "not ours" errors to dlock.ErrNotHeld.
func notHeld(err error) error {
	if errors.Is(err, redislock.ErrLockNotHeld) || errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
	}
	return err
}
