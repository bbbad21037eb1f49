// Package redsyncpeer presents github.com/go-redsync/redsync/v4 (v4.18.1) as a
// dlock.Locker: Redlock over one Redis master or several independent ones (quorum
// N/2+1), so that the conformance suite, the fault scenarios and the benchmarks run on
// it beside dlock's own backends.
//
// Each Acquire makes one redsync.Mutex named by the key, with WithExpiry(ttl), and
// calls its LockContext: redsync's own loop of tries (SET NX PX on every master, in
// parallel, each bounded by 5% of the TTL), with its own random 50–250 ms delay between
// tries. The adapter sets WithTries(math.MaxInt32) so that, as dlock's Acquire
// promises, only ctx ends the wait (redsync's default is 32 tries); dlock.WithRetry is
// ignored. TryAcquire is TryLockContext (one try). Release is UnlockContext and
// Refresh is ExtendContext, both owner-checked by the mutex's random value; a Refresh
// to a different TTL uses a second Mutex with the same value (WithValue).
//
// Done closes at the validity redsync reports (Mutex.Until: the TTL minus the time the
// request took minus 1% drift), moved by each Refresh. Token is 0: redsync has no
// fencing. Waiters poll; nothing wakes them on release.
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
	"github.com/dlock-go/dlock/peers/internal/peerlease"
)

// Option configures New.
type Option func(*config)

type config struct{ mutex []redsync.Option }

// WithMutexOptions adds redsync options to every Mutex, after the adapter's own
// (WithExpiry, WithTries): e.g. redsync.WithTries(32) restores redsync's default
// bound on Acquire, redsync.WithRetryDelay changes its delay.
func WithMutexOptions(opts ...redsync.Option) Option {
	return func(c *config) { c.mutex = append(c.mutex, opts...) }
}

// New returns a Locker that takes locks with redsync on the given masters: one client
// for the single-instance algorithm, N independent masters for Redlock. Close releases
// the leases still held but does not close the clients.
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
	return &locker{rs: redsync.New(pools...), n: len(masters), opts: c.mutex, set: peerlease.NewSet(name)}
}

type locker struct {
	rs   *redsync.Redsync
	n    int
	opts []redsync.Option
	set  *peerlease.Set
}

func (l *locker) mutex(key string, ttl time.Duration, extra ...redsync.Option) *redsync.Mutex {
	opts := append([]redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32)}, l.opts...)
	return l.rs.NewMutex(key, append(opts, extra...)...)
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.lock(ctx, key, opts, true)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.lock(ctx, key, opts, false)
}

func (l *locker) lock(ctx context.Context, key string, opts []dlock.Option, wait bool) (dlock.Lease, error) {
	o, err := l.set.Begin(key, opts)
	if err != nil {
		return nil, err
	}
	m := l.mutex(key, o.TTL)
	if wait {
		err = m.LockContext(ctx)
	} else {
		err = m.TryLockContext(ctx)
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, redsync.ErrFailed) || l.classify(err) == nil {
			return nil, l.set.NotAcquired(ctx, key, err)
		}
		return nil, l.set.Failed(key, l.classify(err))
	}
	return l.set.Grant(key, 0, m.Until(), o, peerlease.Hooks{
		Release: func(ctx context.Context) error {
			if ok, err := m.UnlockContext(ctx); !ok {
				return l.notHeldOr(err)
			}
			return nil
		},
		Refresh: func(ctx context.Context, ttl time.Duration) (time.Time, error) {
			ext := l.mutex(key, ttl, redsync.WithValue(m.Value()))
			if ok, err := ext.ExtendContext(ctx); !ok {
				return time.Time{}, l.notHeldOr(err)
			}
			return ext.Until(), nil
		},
	})
}

// classify returns nil when err says only that the lock is held by another owner (on
// a quorum, or on so many masters that no quorum is left), and otherwise err itself,
// wrapped with dlock.ErrUnavailable when masters failed to answer.
func (l *locker) classify(err error) error {
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
func (l *locker) notHeldOr(err error) error {
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
func (l *locker) Close() error {
	l.set.Close()
	return nil
}
