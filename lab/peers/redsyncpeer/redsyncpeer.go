// Package redsyncpeer presents github.com/go-redsync/redsync/v4 (v4.18.1) as a
// dlock.Locker: Redlock over one Redis master or several independent ones (quorum
// N/2+1), so that the conformance suite, the fault scenarios and the benchmarks run on
// it beside dlock's own backends.
//
// The library is driven as a dlock driver (package driver) and runs under dlock.New
// like every backend, so its leases are dlock's own (validity deadline, auto-renewal,
// Done/Err, Observer events). Each Acquire makes one redsync.Mutex named by the key,
// with WithExpiry(ttl), and calls its LockContext: redsync's own loop of tries (SET NX
// PX on every master, in parallel, each bounded by 5% of the TTL), with its own random
// 50–250 ms delay between tries. The adapter sets WithTries(math.MaxInt32) so that, as
// dlock's Acquire promises, only ctx ends the wait (redsync's default is 32 tries);
// with dlock.WithRetry, dlock retries single tries by that strategy instead.
// TryAcquire is TryLockContext (one try). Release is UnlockContext and Refresh is
// ExtendContext, both owner-checked by the mutex's random value; a Refresh to a
// different TTL uses a second Mutex with the same value (WithValue).
//
// Done closes at the validity redsync reports (Mutex.Until: the TTL minus the time the
// request took minus 1% drift, which is driver.StandardDrift's 1% plus 2ms less
// 2ms), moved by each Refresh. Token is 0: redsync has no fencing. Waiters poll;
// nothing wakes them on release.
package redsyncpeer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// MinTTL is the shortest TTL the peer is declared for: redsync's own timing (its
// drift allowance and retry delay) leaves too little of a shorter lease.
const MinTTL = 300 * time.Millisecond

// Option configures New.
type Option func(*config)

type config struct{ mutex []redsync.Option }

// WithMutexOptions adds redsync options to every Mutex, after the adapter's own
// (WithExpiry, WithTries): e.g. redsync.WithTries(32) restores redsync's default
// bound on Acquire, redsync.WithRetryDelay changes its delay.
func WithMutexOptions(opts ...redsync.Option) Option {
	return func(c *config) { c.mutex = append(c.mutex, opts...) }
}

// New returns a Locker that runs redsync over masters, one client per independent
// Redis master. Close releases the leases still held but does not close the clients.
func New(masters []redis.UniversalClient, opts ...Option) dlock.Locker {
	var c config
	for _, o := range opts {
		o(&c)
	}
	pools := make([]rsredis.Pool, len(masters))
	for i, m := range masters {
		pools[i] = goredis.NewPool(m)
	}
	name := "redsync"
	if len(masters) > 1 {
		name = fmt.Sprintf("redsync(%d)", len(masters))
	}
	d := &rsDriver{rs: redsync.New(pools...), n: len(masters), opts: c.mutex}
	return dlock.New(d, driver.Info{Name: name})
}

type rsDriver struct {
	rs   *redsync.Redsync
	n    int
	opts []redsync.Option
}

var _ driver.Waiter = (*rsDriver)(nil)

func (l *rsDriver) mutex(key string, ttl time.Duration, extra ...redsync.Option) *redsync.Mutex {
	opts := append([]redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32)}, l.opts...)
	return l.rs.NewMutex(key, append(opts, extra...)...)
}

func (l *rsDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return l.lock(ctx, key, ttl, false)
}

func (l *rsDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return l.lock(ctx, key, ttl, true)
}

func (l *rsDriver) lock(ctx context.Context, key string, ttl time.Duration, wait bool) (driver.Lock, error) {
	m := l.mutex(key, ttl)
	var err error
	if wait {
		err = m.LockContext(ctx)
	} else {
		err = m.TryLockContext(ctx)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
	case errors.Is(err, redsync.ErrFailed) || l.classify(err) == nil:
		return nil, fmt.Errorf("%w: %w", driver.Busy(0), err)
	default:
		return nil, l.classify(err)
	}
	return &rsLock{d: l, key: key, ttl: ttl, m: m}, nil
}

func (l *rsDriver) Close() error { return nil }

// rsLock is one redsync.Mutex held.
type rsLock struct {
	d   *rsDriver
	key string
	ttl time.Duration
	m   *redsync.Mutex
}

func (k *rsLock) Token() uint64 { return 0 }

// ValidFrom makes dlock's deadline redsync's Until: dlock sets it at
// ValidFrom + TTL − StandardDrift(TTL).
func (k *rsLock) ValidFrom() time.Time {
	return k.m.Until().Add(-k.ttl + driver.StandardDrift(k.ttl))
}

func (k *rsLock) Refresh(ctx context.Context, ttl time.Duration) error {
	ext := k.d.mutex(k.key, ttl, redsync.WithValue(k.m.Value()))
	if ok, err := ext.ExtendContext(ctx); !ok {
		return k.d.notHeldOr(err)
	}
	return nil
}

func (k *rsLock) Unlock(ctx context.Context) error {
	if ok, err := k.m.UnlockContext(ctx); !ok {
		return k.d.notHeldOr(err)
	}
	return nil
}

func (l *rsDriver) classify(err error) error {
	var taken *redsync.ErrTaken
	var nodeErr *redsync.RedisError
	switch {
	case err == nil, errors.As(err, &taken):
		return nil
	case errors.As(err, &nodeErr) && l.n > 1:
		return fmt.Errorf("%w: no quorum of %d masters: %w", dlock.ErrUnavailable, l.n/2+1, err)
	case errors.As(err, &nodeErr), errors.Is(err, redsync.ErrExtendFailed):
		return err
	}
	return nil // only "taken" or "already expired" answers, short of a quorum
}

// notHeldOr maps a failed Unlock or Extend: dlock.ErrNotHeld when the masters said the
// lock was not ours, else the error.
func (l *rsDriver) notHeldOr(err error) error {
	if c := l.classify(err); c != nil {
		return c
	}
	if err == nil {
		return dlock.ErrNotHeld
	}
	return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
}

// Close releases the leases still held and ends them with dlock.ErrClosed; later calls
// return dlock.ErrClosed. It does not close the Redis clients. Idempotent.
