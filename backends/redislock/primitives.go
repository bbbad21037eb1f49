package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks (driver.Semaphorer, driver.RWLocker): one Lua
// script per operation on the key's holders (a sorted set of owner values by
// expiry, on the server's clock) and settings (kind, limit, exclusive holder); see
// ops_primitives.go for the layout. A holder that vanishes keeps its
// lease until its own expiry, no longer; a release publishes on the primitive's
// channel, which wakes the waiters (Subscribe). Waiters poll otherwise: there is
// no queue, so no order and no writer preference.

func (d *redisDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.primAcquire(ctx, key, ttl, kindSemaphore, strconv.Itoa(limit), driver.SemaphoreWake(key))
}

func (d *redisDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	mode := modeExclusive
	if shared {
		mode = modeShared
	}
	return d.primAcquire(ctx, key, ttl, kindRWLock, mode, driver.RWWake(key))
}

func (d *redisDriver) primAcquire(ctx context.Context, key string, ttl time.Duration, kind, arg, wake string) (driver.Lock, error) {
	value := redisops.NewOwner(ctx)
	var r primResult
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		r, err = primAcquireOp(ctx, s, key, value, ttl, kind, arg)
		return r.Granted, err
	})
	lk := &primLock{d: d, key: key, value: value, wake: wake, token: r.Token}
	switch {
	case err != nil:
		if r.Granted || !redisops.IsReply(err) {
			lk.cleanup() // granted but not acknowledged, or no reply: undo it
		}
		return nil, err
	case r.Conflict != "":
		return nil, fmt.Errorf("%w: %q is %s", dlock.ErrConflict, key, r.Conflict)
	case !r.Granted:
		return nil, driver.Busy(r.Remaining)
	}
	return lk, nil
}

// primLock is one lease of a semaphore or read-write lock.
type primLock struct {
	d                *redisDriver
	key, value, wake string
	token            uint64
}

func (l *primLock) Token() uint64 { return l.token }

func (l *primLock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.d.refresh(ctx, l.key, func(s redis.Scripter) (bool, error) {
		return primRefreshOp(ctx, s, l.key, l.value, ttl)
	})
}

func (l *primLock) Unlock(ctx context.Context) error {
	return heldUnless(primReleaseOp(ctx, l.d.c, l.key, l.value, l.wake))
}

// cleanup releases the lease, best effort, with a fresh context.
func (l *primLock) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = primReleaseOp(ctx, l.d.c, l.key, l.value, l.wake)
}
