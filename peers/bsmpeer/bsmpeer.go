// Package bsmpeer presents github.com/bsm/redislock (v0.9.4) as a dlock.Locker, so
// that the conformance suite, the fault scenarios and the benchmarks run on it beside
// dlock's own backends.
//
// Acquire and TryAcquire are one call of redislock's Client.Obtain (SET NX PX in a Lua
// script), with redislock's own retry loop: TryAcquire passes no retry strategy
// (redislock's default, one attempt); Acquire passes the strategy given with
// dlock.WithRetry (adapted to redislock.RetryStrategy: a negative delay stops it) or,
// without one, redislock.ExponentialBackoff(1ms, 250ms), redislock's own strategy
// with the bounds of dlock.DefaultRetry. Release is Lock.Release and Refresh is
// Lock.Refresh, both owner-checked by the lock's random token.
//
// What redislock does not give: fencing (Token is 0), wake-ups on release (waiters
// poll), and a validity: Obtain and Refresh report none, so the adapter estimates it
// as dlock's own backends do, the TTL counted from the start of the call less
// driver.DefaultDrift (1% + 2ms); Done closes then. When ctx has no
// deadline, redislock itself bounds Obtain to the TTL: Acquire then gives up after
// one TTL with ErrNotAcquired.
package bsmpeer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/peers/internal/peerlease"
)

// Name is the peer's name in errors.
const Name = "bsm/redislock"

// New returns a Locker that takes locks with redislock on client (a *redis.Client or
// any redislock.RedisClient). Close releases the leases still held but does not close
// client.
func New(client redislock.RedisClient) dlock.Locker {
	return &locker{c: redislock.New(client), set: peerlease.NewSet(Name)}
}

type locker struct {
	c   *redislock.Client
	set *peerlease.Set
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.obtain(ctx, key, opts, true)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.obtain(ctx, key, opts, false)
}

func (l *locker) obtain(ctx context.Context, key string, opts []dlock.Option, wait bool) (dlock.Lease, error) {
	o, err := l.set.Begin(key, opts)
	if err != nil {
		return nil, err
	}
	var ro *redislock.Options
	if wait {
		ro = &redislock.Options{RetryStrategy: retryStrategy(o.Retry)}
	}
	t0 := time.Now()
	lk, err := l.c.Obtain(ctx, key, o.TTL, ro)
	switch {
	case errors.Is(err, redislock.ErrNotObtained):
		return nil, l.set.NotAcquired(ctx, key, nil)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// redislock's own deadline of one TTL for a ctx without one.
		return nil, l.set.NotAcquired(ctx, key, fmt.Errorf("redislock gave up after the ttl %v: %w", o.TTL, err))
	case ctx.Err() != nil && err != nil:
		return nil, l.set.NotAcquired(ctx, key, err)
	case err != nil:
		return nil, l.set.Failed(key, err)
	}
	return l.set.Grant(key, 0, validity(t0, o.TTL), o, peerlease.Hooks{
		Release: func(ctx context.Context) error { return notHeld(lk.Release(ctx)) },
		Refresh: func(ctx context.Context, ttl time.Duration) (time.Time, error) {
			t0 := time.Now()
			if err := notHeld(lk.Refresh(ctx, ttl, nil)); err != nil {
				return time.Time{}, err
			}
			return validity(t0, ttl), nil
		},
	})
}

// validity is the adapter's estimate of when a lock set at t0 for ttl may be gone.
func validity(t0 time.Time, ttl time.Duration) time.Time {
	return t0.Add(ttl - driver.DefaultDrift(ttl))
}

// notHeld maps redislock's "not ours" errors to dlock.ErrNotHeld.
func notHeld(err error) error {
	if errors.Is(err, redislock.ErrLockNotHeld) || errors.Is(err, redislock.ErrNotObtained) {
		return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
	}
	return err
}

// Close releases the leases still held and ends them with dlock.ErrClosed; later calls
// return dlock.ErrClosed. It does not close the Redis client. Idempotent.
func (l *locker) Close() error {
	l.set.Close()
	return nil
}

// retryStrategy adapts a dlock.RetryStrategy to redislock's stateful interface, whose
// NextBackoff below 1ns stops the retries.
func retryStrategy(s dlock.RetryStrategy) redislock.RetryStrategy {
	if s == nil {
		return redislock.ExponentialBackoff(time.Millisecond, 250*time.Millisecond)
	}
	return &adapted{s: s}
}

type adapted struct {
	s        dlock.RetryStrategy
	attempts atomic.Int64
}

func (a *adapted) NextBackoff() time.Duration {
	d := a.s.Backoff(int(a.attempts.Add(1)))
	switch {
	case d < 0:
		return 0 // stop
	case d == 0:
		return 1 // at once; 0 would stop redislock
	}
	return d
}
