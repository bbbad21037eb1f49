package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// fairDriver waits in a queue of waiters that the store keeps (fairAcquire): a
// release wakes the first waiter alone, so a hand-off costs the same requests
// however many wait. A waiter renews its place every third of its TTL, so a waiter
// that crashed is dropped within its TTL; a waiter also looks again at each renewal
// and when the holder's TTL runs out, so that no single lost message stalls the
// queue. With window 0 (WithFIFO) the lock is granted in arrival order; otherwise
// (the default mode) a caller may take a free lock ahead of waiters that arrived
// less than window ago — the one who released and asks again keeps going without a
// hand-off — but not ahead of one that has waited longer.
type fairDriver struct {
	*redisDriver
	window time.Duration
}

var _ driver.Waiter = fairDriver{}

// DefaultBargeWindow is the default mode's barging window (fairDriver): a waiter
// that has waited this long is served before anyone who asks after it.
const DefaultBargeWindow = 2 * time.Millisecond

// TryLock takes the lock only if it is free and no one waits (or, with a window,
// no one has waited longer than it).
func (d fairDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, res, err := d.attempt(ctx, key, newFairCall(key, redisops.NewOwner(ctx), ttl, d.window), false)
	if lk != nil || err != nil {
		return lk, err
	}
	return nil, driver.Busy(res.Holder)
}

// Lock joins key's queue and waits for its turn: woken by a release naming it, at
// each renewal of its place (every third of ttl), and when the holder's TTL runs
// out. When ctx ends it leaves the queue (and gives back a lock granted to a request
// whose reply it did not wait for).
func (d fairDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	f := newFairCall(key, redisops.NewOwner(ctx), ttl, d.window) // every attempt and the release use it
	return waitTurn(ctx, ttl,
		func(ctx context.Context) (driver.Lock, fairResult, error) { return d.attempt(ctx, key, f, true) },
		func(ctx context.Context) (<-chan struct{}, func(), error) {
			return d.releases.SubscribeTurn(ctx, key, f.value)
		},
		func() { d.leave(f) })
}

// waitTurn is the wait of Lock and LockAll, and of the primitives' waiters:
// attempt (which joins the queues or renews the caller's places) at once, then,
// having subscribed to the caller's turn messages, again at once (the release may
// have come before) and then each time a turn message comes, its places are due
// for renewal (every third of ttl), a holder's TTL runs out, or a first waiter that
// did not take the free lock is dropped. When ctx ends it calls leave.
func waitTurn(ctx context.Context, ttl time.Duration,
	attempt func(context.Context) (driver.Lock, fairResult, error),
	subscribe func(context.Context) (<-chan struct{}, func(), error),
	leave func()) (driver.Lock, error) {
	lk, res, err := attempt(ctx)
	if lk != nil || err != nil {
		return lk, driver.WaitErr(ctx, err)
	}
	var wake <-chan struct{}
	if w, stop, err := subscribe(ctx); err == nil {
		defer stop()
		wake = w
	} // else the Locker is closing: ctx ends the wait
	renew := max(ttl/3, time.Millisecond)
	for {
		// Look again at once after subscribing: the release may have come before.
		if lk, res, err = attempt(ctx); lk != nil || err != nil {
			return lk, driver.WaitErr(ctx, err)
		}
		delay := renew
		switch {
		case !res.Free && res.Holder > 0:
			delay = min(delay, res.Holder+time.Millisecond)
		case res.Free && res.Place == 1:
			// The first waiter has not taken the free lock: if it is gone, it is
			// dropped at its deadline, and this waiter comes next.
			delay = min(delay, res.HeadDeadline+time.Millisecond)
		}
		t := time.NewTimer(delay)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			leave()
			return nil, ctx.Err()
		}
	}
}

// attempt runs fair.lua's acquire once for f (joining or staying in the queue
// with wait); on an error after which the script may have run it leaves the queue
// and gives back what it may have been granted.
func (d fairDriver) attempt(ctx context.Context, key string, f *fairCall, wait bool) (driver.Lock, fairResult, error) {
	var res fairResult
	sent := time.Now()
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		res, err = f.try(ctx, s, wait)
		return res.Acquired, err
	})
	if err != nil {
		leaveIfSent(err, res.Acquired, wait, func() { d.leave(f) })
		return nil, res, err
	}
	if !res.Acquired {
		return nil, res, nil
	}
	return &redisLock{d: d.redisDriver, key: key, value: f.value, token: res.Token, fair: f, validFrom: sent}, res, nil
}

// leaveIfSent is the error path of every waiter's attempt (the fair mutex's, a set's,
// a semaphore's or read-write lock's, a candidate's). After an error that is not
// the script's own reply the script may have run; and a waiting caller, or one the
// reply granted, may be queued or hold the lock. Then leave takes the caller out
// of the queues and gives back what it may hold; after the script's own refusal of
// a try there is nothing to undo.
func leaveIfSent(err error, granted, wait bool, leave func()) {
	if granted || !redisops.IsReply(err) || wait {
		leave()
	}
}

// leave takes f's owner out of its key's queue and gives back the lock if it holds
// it, best effort, with a fresh context: what it misses is dropped at the waiter's
// deadline or the lock's TTL.
func (d fairDriver) leave(f *fairCall) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = f.unlock(ctx, d.c, true)
}
