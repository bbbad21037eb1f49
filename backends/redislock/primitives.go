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
// no queue, so no order. The read-write lock prefers writers (LockRW): a waiting
// writer keeps new readers out.

func (d *redisDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.tryPrim(ctx, key, ttl, kindSemaphore, strconv.Itoa(limit), driver.SemaphoreWake(key))
}

func (d *redisDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	mode := modeExclusive
	if shared {
		mode = modeShared
	}
	return d.tryPrim(ctx, key, ttl, kindRWLock, mode, driver.RWWake(key))
}

// tryPrim makes one attempt at key's primitive for a new owner: Busy when it is
// full.
func (d *redisDriver) tryPrim(ctx context.Context, key string, ttl time.Duration, kind, arg, wake string) (driver.Lock, error) {
	lk, r, err := d.primAcquire(ctx, key, redisops.NewOwner(ctx), ttl, kind, arg, wake, false)
	if lk == nil && err == nil {
		return nil, driver.Busy(r.Remaining)
	}
	return lk, err
}

var _ driver.RWWaiter = (*redisDriver)(nil)

// LockRW waits for key's read-write lock (driver.RWWaiter), woken by releases and
// looking again at least every third of ttl and when the first holder's lease (or
// the waiting writer's place) runs out. An exclusive waiter becomes the key's
// waiting writer when none is (writerWaitKey), which keeps new shared acquirers out
// until it is granted, leaves, or stops asking for ttl (a crashed waiter); so a
// writer gets in once the readers before it are done, however many keep coming. A
// second waiting writer waits behind the first. Writers are not ordered among
// themselves, nor readers.
func (d *redisDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	mode := modeExclusive
	if shared {
		mode = modeShared
	}
	wake := driver.RWWake(key)
	value := redisops.NewOwner(ctx)
	woken, stop, err := d.releases.Subscribe(ctx, wake)
	if err == nil {
		defer stop()
	} // else the Locker is closing: ctx ends the wait
	renew := max(ttl/3, time.Millisecond)
	for {
		lk, r, err := d.primAcquire(ctx, key, value, ttl, kindRWLock, mode, wake, !shared)
		if lk != nil || err != nil {
			return lk, driver.WaitErr(ctx, err)
		}
		t := time.NewTimer(min(renew, r.Remaining+time.Millisecond))
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			if !shared {
				(&primLock{d: d, key: key, value: value, wake: wake}).cleanup() // leave the writer's place
			}
			return nil, ctx.Err()
		}
	}
}

// primAcquire makes one attempt at key's primitive for the owner value (see
// primAcquireOp; wait: an exclusive waiter that takes the writer's place).
func (d *redisDriver) primAcquire(ctx context.Context, key, value string, ttl time.Duration, kind, arg, wake string, wait bool) (driver.Lock, primResult, error) {
	var r primResult
	sent := time.Now()
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		r, err = primAcquireOp(ctx, s, key, value, ttl, kind, arg, wait)
		return r.Granted, err
	})
	lk := &primLock{d: d, key: key, value: value, wake: wake, token: r.Token, validFrom: sent}
	switch {
	case err != nil:
		if r.Granted || !redisops.IsReply(err) || wait {
			lk.cleanup() // granted but not acknowledged, no reply, or a writer's place: undo it
		}
		return nil, r, err
	case r.Conflict != "":
		return nil, r, fmt.Errorf("%w: %q is %s", dlock.ErrConflict, key, r.Conflict)
	case !r.Granted:
		return nil, r, nil
	}
	return lk, r, nil
}

// primLock is one lease of a semaphore or read-write lock.
type primLock struct {
	d                *redisDriver
	key, value, wake string
	token            uint64
	// validFrom is when the request that granted the lease was sent (LockRW: a
	// waiter's grant comes long after its wait began).
	validFrom time.Time
}

// ValidFrom is when the request that granted the lease was sent (driver.ValidFrom).
func (l *primLock) ValidFrom() time.Time { return l.validFrom }

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
