package redisops

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The FIFO mode's operations: the lock as Acquire/Release keep it, plus a queue of
// waiters in the store (QueueKey, DeadlineKey), kept by the same scripts. Waiters
// are served in arrival order; a waiter that stops renewing its place (a crashed
// process) is dropped at its deadline.

var (
	//go:embed fair.lua
	fairSrc    string
	fairScript = redis.NewScript(fairSrc)
)

// fairKeys are the keys fair.lua works on for key.
func fairKeys(key string) []string {
	return []string{LockKey(key), FenceKey(key), QueueKey(key), DeadlineKey(key)}
}

// FairResult is the outcome of FairAcquire.
type FairResult struct {
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

// FairAcquire takes key's lock for value in arrival order: granted when the lock is
// free and either no one waits or value is the first waiter. With wait, a caller
// that is not granted joins the queue (or, already in it, renews its place) for
// waitTTL: unless it asks again within waitTTL it is dropped. Without wait it only
// tries. Like Acquire, the script increments the fencing counter on a grant, is
// idempotent for a value that already holds the lock, and may have run when an
// error other than a reply error comes back.
func FairAcquire(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration, wait bool, waitTTL time.Duration) (FairResult, error) {
	op := "try"
	if wait {
		op = "wait"
	}
	res, err := fairScript.Run(ctx, c, fairKeys(key), op, value, Millis(ttl), Millis(waitTTL)).Int64Slice()
	if err != nil {
		return FairResult{}, err
	}
	switch {
	case len(res) == 2 && res[0] == 1 && res[1] > 0:
		return FairResult{Acquired: true, Token: uint64(res[1])}, nil
	case len(res) == 4 && res[0] == 0:
		return FairResult{Free: res[1] == 0, Holder: max(time.Duration(res[1])*time.Millisecond, 0), Place: int(res[2]),
			HeadDeadline: time.Duration(res[3]) * time.Millisecond}, nil
	}
	return FairResult{}, fmt.Errorf("redisops: fair acquire script returned %v", res)
}

// FairRelease deletes key's lock if it holds value and, when someone waits, tells
// the first waiter on Channel(key) (the message is its name); with leave it also
// takes value out of the queue (a wait that ended), and then tells the new first
// waiter if the lock is free. It reports whether it deleted the lock.
func FairRelease(ctx context.Context, c redis.Scripter, key, value string, leave bool) (bool, error) {
	op := "release"
	if leave {
		op = "leave"
	}
	n, err := fairScript.Run(ctx, c, fairKeys(key), op, value, Channel(key)).Int64()
	return n == 1, err
}
