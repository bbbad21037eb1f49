package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// The FIFO mode's operations: the lock as Acquire/Release keep it, plus a queue of
// waiters in the store (queueKey, deadlineKey), kept by the same scripts. Waiters
// are served in arrival order; a waiter that stops renewing its place (a crashed
// process) is dropped at its deadline.

// queuePrefix starts the key of each lock's queue of waiters (FIFO mode), and
// deadlinePrefix the key of their deadlines.
const (
	queuePrefix    = "dlock:queue\xff"
	deadlinePrefix = "dlock:qdead\xff"
)

// queueKey returns the Redis key of key's queue of waiters (a sorted set: waiter →
// arrival), and deadlineKey that of their deadlines (waiter → server time in ms),
// both in LockKey(key)'s hash slot.
func queueKey(key string) string    { return redisops.Tagged(queuePrefix, key) }
func deadlineKey(key string) string { return redisops.Tagged(deadlinePrefix, key) }

// fairKeys are the keys fair.lua works on for key and the owner value.
func fairKeys(key, value string) []string {
	return []string{redisops.LockKey(key), redisops.FenceKey(key), queueKey(key), deadlineKey(key),
		redisops.ReleasedKey(key, value)}
}

// fairResult is the outcome of fairAcquire.
type fairResult struct {
	Acquired bool
	Token    uint64 // acquired: the fencing token
	// Free (not acquired): the lock is free, but another waiter comes first.
	Free bool
	// Holder (not acquired): the holder's remaining TTL; 0 when free or unknown.
	Holder time.Duration
	// Place is the caller's place in the queue, 0 for the first; -1 when it is not
	// queued (a try).
	Place int
	// HeadDeadline is how long until the first waiter's place expires (0 if none):
	// when the lock is free and the first waiter does not take it by then, it is gone.
	HeadDeadline time.Duration
}

// fairAcquire takes key's lock for value in arrival order: granted when the lock is
// free and either no one waits, or value is the first waiter, or the first waiter
// arrived less than window ago (0: never; see fair.lua). With wait, a caller
// that is not granted joins the queue (or, already in it, renews its place) for
// waitTTL: unless it asks again within waitTTL it is dropped. Without wait it only
// tries. Like Acquire, the script increments the fencing counter on a grant, is
// idempotent for a value that already holds the lock, and may have run when an
// error other than a reply error comes back.
func fairAcquire(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration, wait bool, waitTTL, window time.Duration) (fairResult, error) {
	return fairAcquireKeys(ctx, c, fairKeys(key, value), value, ttl, wait, waitTTL, window)
}

// fairAcquireKeys is fairAcquire on keys, fairKeys(key, value) made once by a caller
// that asks more than once (a waiter) or keeps them for the release.
func fairAcquireKeys(ctx context.Context, c redis.Scripter, keys []string, value string, ttl time.Duration, wait bool, waitTTL, window time.Duration) (fairResult, error) {
	op := "try"
	if wait {
		op = "wait"
	}
	res, err := fairScript.Run(ctx, c, keys, op, value, redisops.Millis(ttl), redisops.Millis(waitTTL),
		window.Microseconds()).Int64Slice()
	if err != nil {
		return fairResult{}, err
	}
	switch {
	case len(res) == 2 && res[0] == 1 && res[1] > 0:
		return fairResult{Acquired: true, Token: uint64(res[1])}, nil
	case len(res) == 4 && res[0] == 0:
		return fairResult{Free: res[1] == 0, Holder: max(time.Duration(res[1])*time.Millisecond, 0), Place: int(res[2]),
			HeadDeadline: time.Duration(res[3]) * time.Millisecond}, nil
	}
	return fairResult{}, fmt.Errorf("fair acquire script returned %v", res)
}

// fairRelease deletes key's lock if it holds value and, when someone waits, tells
// the first waiter on Channel(key) (the message is its name); with leave it also
// takes value out of the queue (a wait that ended), and then tells the new first
// waiter if the lock is free. It reports whether it deleted the lock — also when it
// is run again after this owner's release already deleted it (a reply lost).
func fairRelease(ctx context.Context, c redis.Scripter, key, value string, leave bool) (bool, error) {
	return fairReleaseKeys(ctx, c, fairKeys(key, value), key, value, leave)
}

// fairReleaseKeys is fairRelease on keys, fairKeys(key, value) kept from the acquire.
func fairReleaseKeys(ctx context.Context, c redis.Scripter, keys []string, key, value string, leave bool) (bool, error) {
	op := "release"
	if leave {
		op = "leave"
	}
	n, err := fairScript.Run(ctx, c, keys, op, value, redisops.Channel(key)).Int64()
	return n == 1, err
}
