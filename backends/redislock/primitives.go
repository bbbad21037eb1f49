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

// Semaphores and read-write locks (driver.Semaphorer, driver.SemaphoreWaiter,
// driver.RWLocker, driver.RWWaiter): one Lua script per operation on the key's
// holders (a sorted set of owner values by expiry, on the server's clock) and
// settings (kind, limit, exclusive holder); see ops_primitives.go for the layout.
// A holder that vanishes keeps its lease until its own expiry, no longer.
//
// Waiting wakes as few waiters as can use a release. A semaphore's waiters are
// kept in the store, by arrival; a release tells the first of them, one per free
// permit, each on its own channel. A free permit is not granted past waiters that
// have waited DefaultBargeWindow or longer, so no waiter starves, but there is no
// strict order (a newcomer may pass waiters that arrived less than the window
// ago). The read-write lock prefers writers (LockRW): a waiting writer keeps new
// readers out, and a release that leaves the lock free tells that writer alone;
// without a waiting writer a release tells every waiter (readers all come in at
// once). Every waiter also looks again every third of its TTL and when the lease
// it waits behind runs out, so a lost message delays it by at most that.

func (d *redisDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.tryPrim(ctx, key, ttl, kindSemaphore, strconv.Itoa(limit), driver.SemaphoreWake(key))
}

func (d *redisDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.tryPrim(ctx, key, ttl, kindRWLock, rwMode(shared), driver.RWWake(key))
}

// rwMode is the primitive argument (primAcquireOp) of a read-write lease.
func rwMode(shared bool) string {
	if shared {
		return modeShared
	}
	return modeExclusive
}

// tryPrim makes one attempt at key's primitive for a new owner: Busy when it is
// full.
func (d *redisDriver) tryPrim(ctx context.Context, key string, ttl time.Duration, kind, arg, wake string) (driver.Lock, error) {
	l := &primLock{d: d, key: key, value: redisops.NewOwner(ctx), wake: wake, kind: kind, arg: arg}
	lk, r, err := l.acquire(ctx, ttl, false)
	if lk == nil && err == nil {
		return nil, driver.Busy(r.Remaining)
	}
	return lk, err
}

var (
	_ driver.SemaphoreWaiter = (*redisDriver)(nil)
	_ driver.RWWaiter        = (*redisDriver)(nil)
)

// LockSemaphore waits for a permit of key's semaphore (driver.SemaphoreWaiter) among
// its waiters in the store: woken by a release that names it (one waiter per permit
// freed), looking again every third of ttl (which keeps its place: a waiter that
// stops asking is dropped after ttl) and when the first holder's lease runs out.
// When ctx ends it leaves the waiters, and a permit freed for it goes to the next.
func (d *redisDriver) LockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	l := &primLock{d: d, key: key, value: redisops.NewOwner(ctx), wake: driver.SemaphoreWake(key), kind: kindSemaphore, arg: strconv.Itoa(limit)}
	return l.wait(ctx, ttl, true, func(ctx context.Context) (<-chan struct{}, func(), error) {
		return d.releases.SubscribeTurn(ctx, l.wake, l.value)
	})
}

// LockRW waits for key's read-write lock (driver.RWWaiter), woken by releases and
// looking again at least every third of ttl and when the first holder's lease (or
// the waiting writer's place) runs out. Exclusive waiters queue in the store (the
// semaphore's waiter keys, by arrival), and the first of them is the key's waiting
// writer (writerWaitKey), which keeps new shared acquirers out until it is granted,
// leaves, or stops asking for ttl (a crashed waiter); so a writer gets in once the
// readers before it are done, however many keep coming; the release that frees the
// lock then wakes it alone, and its grant makes the next queued writer the waiting
// one. Readers are not ordered among themselves, and writers not strictly: a
// writer that finds the lock free takes it, ahead of any queued writer.
func (d *redisDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	l := &primLock{d: d, key: key, value: redisops.NewOwner(ctx), wake: driver.RWWake(key), kind: kindRWLock, arg: rwMode(shared)}
	return l.wait(ctx, ttl, !shared, func(ctx context.Context) (<-chan struct{}, func(), error) {
		if shared {
			return d.releases.Subscribe(ctx, l.wake)
		}
		return d.releases.SubscribeOwn(ctx, l.wake, l.value)
	})
}

// wait is the wait of LockSemaphore and LockRW for l's owner (waitTurn): queued
// (a semaphore waiter, a writer) or not, woken by what subscribe listens to.
func (l *primLock) wait(ctx context.Context, ttl time.Duration, queued bool, subscribe func(context.Context) (<-chan struct{}, func(), error)) (driver.Lock, error) {
	return waitTurn(ctx, ttl,
		func(ctx context.Context) (driver.Lock, fairResult, error) {
			lk, r, err := l.acquire(ctx, ttl, queued)
			return lk, fairResult{Holder: r.Remaining}, err
		},
		subscribe,
		func() {
			if queued {
				l.cleanup() // leave the waiters (or the writer's place), passing a wake-up on
			}
		})
}

// acquire makes one attempt at l's primitive for its owner (see primAcquireOp;
// wait: a waiter, which joins the semaphore's waiters or takes the writer's place)
// and returns l granted, with its token.
func (l *primLock) acquire(ctx context.Context, ttl time.Duration, wait bool) (driver.Lock, primResult, error) {
	var r primResult
	sent := time.Now()
	err := l.d.write(ctx, l.key, func(s redis.Scripter) (bool, error) {
		var err error
		r, err = primAcquireOp(ctx, s, l.key, l.value, ttl, l.kind, l.arg, wait)
		return r.Granted, err
	})
	switch {
	case err != nil:
		leaveIfSent(err, r.Granted, wait, l.cleanup)
		return nil, r, err
	case r.Conflict != "":
		return nil, r, fmt.Errorf("%w: %q is %s", dlock.ErrConflict, l.key, r.Conflict)
	case !r.Granted:
		return nil, r, nil
	}
	l.token, l.validFrom = r.Token, sent
	return l, r, nil
}

// primLock is one owner's lease of a semaphore or read-write lock, or its wait
// for one.
type primLock struct {
	d                *redisDriver
	key, value, wake string
	kind, arg        string // as primAcquireOp takes them
	token            uint64
	// validFrom is when the request that granted the lease was sent (a waiter's
	// grant comes long after its wait began).
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
	return heldUnless(l.release(ctx))
}

// release runs primReleaseOp for l's owner.
func (l *primLock) release(ctx context.Context) (bool, error) {
	limit := ""
	if l.kind == kindSemaphore {
		limit = l.arg
	}
	return primReleaseOp(ctx, l.d.c, l.key, l.value, l.wake, limit)
}

// cleanup releases the lease or leaves the wait, best effort, with a fresh context.
func (l *primLock) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = l.release(ctx)
}
