package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// lockKeys returns the lock keys of keys.
func lockKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = redisops.LockKey(k)
	}
	return out
}

// fairAllKeys returns fair_all.lua's keys for the set keys and the owner value:
// for each key, in five groups, those fair.lua works on (fairKeys).
func fairAllKeys(keys []string, value string) []string {
	n := len(keys)
	out := make([]string, 5*n)
	for i, k := range keys {
		names, _ := fairNames(k, value)
		for g, name := range names {
			out[g*n+i] = name
		}
	}
	return out
}

// fairAll runs fair_all.lua's op ('try', 'wait', 'release' or 'leave') for the
// set keys and the owner value, with the lease's (and the waiter's) TTL and the
// barging window (see fair_all.lua).
func fairAll(ctx context.Context, c redis.Scripter, op string, keys []string, value string, ttl, window time.Duration) (any, error) {
	return fairAllScript.Run(ctx, c, fairAllKeys(keys, value), op, value, redisops.Millis(ttl), redisops.Millis(ttl),
		window.Microseconds(), redisops.ChannelPrefix).Result()
}

// acquireAll takes the locks named keys for the owner value for ttl if every one
// is free and no one waits ahead of the caller on any (fair_all.lua), in one
// script, each with its own fencing token (its fence counter, as Acquire counts
// it); with wait, a caller not granted joins (or stays in) every key's queue for
// ttl. It returns the tokens in the order of keys, or what fairResult says of a
// set not granted. The keys must share one Redis Cluster hash slot (a single node
// has them all). Errors are as Acquire's: after an error that is not a reply the
// locks may be set, and the caller queued (releaseAll with leave undoes both).
func acquireAll(ctx context.Context, c redis.Scripter, keys []string, value string, ttl, window time.Duration, wait bool) (tokens []uint64, res fairResult, err error) {
	op := "try"
	if wait {
		op = "wait"
	}
	v, err := fairAll(ctx, c, op, keys, value, ttl, window)
	if err != nil {
		return nil, res, err
	}
	a, _ := v.([]any)
	if len(a) == len(keys)+1 && a[0] == int64(1) {
		tokens = make([]uint64, len(keys))
		for i := range tokens {
			t, _ := a[i+1].(int64)
			tokens[i] = uint64(t)
		}
		return tokens, fairResult{Acquired: true}, nil
	}
	if len(a) == 4 && a[0] == int64(0) {
		res, err = parseFair(v)
		return nil, res, err
	}
	return nil, res, fmt.Errorf("fair_all script returned %v for %d keys", v, len(keys))
}

// refreshAll sets the TTL of every lock of keys to ttl if all still hold value. If
// one does not, it releases those that do and returns false.
func refreshAll(ctx context.Context, c redis.Scripter, keys []string, value string, ttl time.Duration) (bool, error) {
	n, err := refreshAllScript.Run(ctx, c, lockKeys(keys), value, redisops.Millis(ttl), redisops.ChannelPrefix).Int64()
	return n == 1, err
}

// releaseAll deletes every lock of keys that still holds value, tells each freed
// key's first waiter (fair_all.lua), and reports whether all of them held it; with
// leave it also takes value out of every key's queue. Like Release it is
// idempotent: run again after its reply was lost, it counts the locks it deleted.
func releaseAll(ctx context.Context, c redis.Scripter, keys []string, value string, leave bool) (bool, error) {
	op := "release"
	if leave {
		op = "leave"
	}
	v, err := fairAll(ctx, c, op, keys, value, 0, 0)
	n, _ := v.(int64)
	return err == nil && int(n) == len(keys), err
}
