package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// Semaphores and read-write locks. For the primitive named key:
//
//	holders:  "dlock:holders\xff{" + tag + "}" + key  (a sorted set: owner value → expiry, ms on the server's clock)
//	settings: "dlock:settings\xff{" + tag + "}" + key (a hash: kind, limit, writer)
//	fence:    "dlock:primfence\xff{" + tag + "}" + key (an integer, never expires)
//
// with tag as for FenceKey, so that all three sit in the hash slot of key (and of
// its mutex). None is valid UTF-8, so no mutex key (the name itself) is one of them.
// A key's semaphore and read-write lock share the holders and settings: the
// settings' kind tells them apart, and an acquire of the other kind while holders
// live is refused (a conflict). Holders and settings expire with the last holder.

// writerWaitKey is the key of the writer that key's read-write lock keeps new shared
// acquirers out for (writer preference): a string, the waiting writer's owner
// value, which expires unless the writer asks again within its TTL.
//
//	waiting writer: "dlock:wwait\xff{" + tag + "}" + key
func writerWaitKey(key string) string { return redisops.Tagged("dlock:wwait\xff", key) }

// semaphoreWaitKeys are the keys of the waiters of key's semaphore (prim_acquire.lua):
// sorted sets of the waiters' arrivals (µs) and deadlines (ms), both on the
// server's clock.
//
//	waiters:   "dlock:squeue\xff{" + tag + "}" + key
//	deadlines: "dlock:sqdead\xff{" + tag + "}" + key
func semaphoreWaitKeys(key string) (waiters, deadlines string) {
	return redisops.Tagged("dlock:squeue\xff", key), redisops.Tagged("dlock:sqdead\xff", key)
}

// primitiveKeys returns the holders, settings and fence keys of key's primitive.
func primitiveKeys(key string) []string {
	return []string{redisops.Tagged("dlock:holders\xff", key), redisops.Tagged("dlock:settings\xff", key), redisops.Tagged("dlock:primfence\xff", key)}
}

// Primitive kinds and read-write modes as the scripts name them.
const (
	kindSemaphore = "semaphore"
	kindRWLock    = "rwlock"
	modeShared    = "shared"
	modeExclusive = "exclusive"
)

// primResult is the outcome of primAcquireOp.
type primResult struct {
	Granted   bool
	Token     uint64
	Remaining time.Duration // when full: until the first holder expires
	// Conflict, when not empty, says how the key is held instead: the other kind,
	// or a semaphore's other limit.
	Conflict string
}

// primAcquireOp takes a lease of key's semaphore (kind kindSemaphore, arg the limit)
// or read-write lock (kind kindRWLock, arg modeShared or modeExclusive) for the owner value
// and ttl, in one script. No shared lease is granted while a writer waits; with
// wait, an exclusive acquirer that is not granted becomes the waiting writer (if
// none is) for ttl, and a semaphore acquirer joins (or stays in) the semaphore's
// waiters for ttl. A free permit is not granted past waiters that have waited
// DefaultBargeWindow or longer (prim_acquire.lua). An error is as for Acquire: the
// lease may have been granted, or the caller queued (release it with the same
// value), unless it is a reply error.
func primAcquireOp(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration, kind, arg string, wait bool) (primResult, error) {
	op := ""
	if wait {
		op = "wait"
	}
	waiters, deadlines := semaphoreWaitKeys(key)
	ks := append(primitiveKeys(key), writerWaitKey(key), waiters, deadlines)
	res, err := primAcquireScript.Run(ctx, c, ks, value, redisops.Millis(ttl), kind, arg, op, DefaultBargeWindow.Microseconds()).Slice()
	if err != nil {
		return primResult{}, err
	}
	if len(res) != 2 {
		return primResult{}, fmt.Errorf("primitive acquire script returned %v", res)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		tok, _ := res[1].(int64)
		if tok <= 0 {
			return primResult{}, fmt.Errorf("fencing counter of %q returned %v", key, res[1])
		}
		return primResult{Granted: true, Token: uint64(tok)}, nil
	case 0:
		ms, _ := res[1].(int64)
		return primResult{Remaining: max(time.Duration(ms)*time.Millisecond, 0)}, nil
	case -1:
		return primResult{Conflict: fmt.Sprintf("held as a %v", res[1])}, nil
	case -2:
		return primResult{Conflict: fmt.Sprintf("held as a semaphore with limit %v", res[1])}, nil
	}
	return primResult{}, fmt.Errorf("primitive acquire script returned %v", res)
}

// primRefreshOp sets the expiry of the owner's lease of key's primitive to ttl from
// now; false when the lease is gone.
func primRefreshOp(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration) (bool, error) {
	n, err := primRefreshScript.Run(ctx, c, primitiveKeys(key)[:2], value, redisops.Millis(ttl)).Int64()
	return n == 1, err
}

// primReleaseOp removes the owner's lease of key's primitive (or its place among
// the semaphore's waiters, or as the read-write lock's waiting writer) and wakes
// the waiters that may now be granted: a semaphore's (limit its limit) first waiters, one
// per free permit, on their own channels (TurnChannel(wake, waiter)), and those
// that look at every release on Channel(wake); a read-write lock's (limit "")
// waiting writer alone on its own channel once no lease is left, or every waiter on
// Channel(wake) when no writer waits (prim_release.lua). False when the lease had
// expired or was gone. Like Release it is idempotent: run again after its reply was
// lost, it returns true again.
func primReleaseOp(ctx context.Context, c redis.Scripter, key, value, wake, limit string) (bool, error) {
	waiters, deadlines := semaphoreWaitKeys(key)
	ks := append(primitiveKeys(key)[:2:2], primReleasedKey(key, value), writerWaitKey(key), waiters, deadlines)
	n, err := primReleaseScript.Run(ctx, c, ks, value, redisops.Channel(wake), limit).Int64()
	return n == 1, err
}

// primReleasedKey is the tombstone of the owner's release of a lease of key's
// primitive: ReleasedKey's, with 0xfe before the value instead of 0xff, so that it is
// never the tombstone of key's mutex.
func primReleasedKey(key, value string) string {
	return redisops.Tagged(redisops.ReleasedPrefix, key) + "\xfe" + value
}
