// Package redisops holds the single-node Redis lock operations the Redis backends
// share: the key layout (keys.go), the Lua scripts and the calls that run them
// (this file), and release notifications (Releases). backends/redislock runs them on
// one Redis deployment; backends/redlock runs them on each of its independent masters.
//
// Every operation is one round trip: EVALSHA, or EVAL when the server does not have
// the script cached yet (then two). None retries; callers decide.
package redisops

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed release.lua
	releaseSrc string

	acquireScript = redis.NewScript(acquireSrc)
	refreshScript = redis.NewScript(refreshSrc)
	releaseScript = redis.NewScript(releaseSrc)
)

// NewValue returns a new owner value: 128 random bits as 32 lowercase hex digits.
func NewValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// Millis returns ttl in whole milliseconds for PX/PEXPIRE, rounded up so that the
// server never holds a lock for less than ttl.
func Millis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// Acquire takes the lock named key for the owner value for ttl, if no one holds it,
// and increments key's fencing counter (FenceKey) in the same atomic script. It
// returns acquired true and the new fencing token, or acquired false and the
// holder's remaining TTL (0 when the holder set none, e.g. a plain SET without PX).
//
// An error may come after the server ran the script (a timeout, ctx ending, a broken
// connection): the lock may then be set. A caller that gives up must Release with
// the same value; a caller (or go-redis, which retries on network errors) that runs
// Acquire again with the same value gets the same grant back. A reply error from the
// server (redis.Error) means nothing was set.
func Acquire(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration) (token uint64, remaining time.Duration, acquired bool, err error) {
	res, err := acquireScript.Run(ctx, c, []string{LockKey(key), FenceKey(key)}, value, Millis(ttl)).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	if len(res) != 2 {
		return 0, 0, false, fmt.Errorf("redisops: acquire script returned %v, want 2 integers", res)
	}
	if res[0] == 1 {
		if res[1] <= 0 {
			return 0, 0, false, fmt.Errorf("redisops: fencing counter %q returned %d", FenceKey(key), res[1])
		}
		return uint64(res[1]), 0, true, nil
	}
	return 0, max(time.Duration(res[1])*time.Millisecond, 0), false, nil
}

// Refresh sets the TTL of key's lock to ttl from now if it still holds value. It
// returns false when the lock is gone or held by another owner.
func Refresh(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration) (bool, error) {
	n, err := refreshScript.Run(ctx, c, []string{LockKey(key)}, value, Millis(ttl)).Int64()
	return n == 1, err
}

// Release deletes key's lock if it still holds value and publishes on Channel(key)
// so that waiters look again. It returns false when the lock was gone or held by
// another owner (then nothing is published).
func Release(ctx context.Context, c redis.Scripter, key, value string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{LockKey(key)}, value, Channel(key)).Int64()
	return n == 1, err
}

// Withdraw is Release without the announcement: it deletes key's lock if it still
// holds value and wakes no one. For a grant taken back before anyone could use it
// (a Redlock attempt that lost its vote), where the lock was never free for waiters
// to hear about.
func Withdraw(ctx context.Context, c redis.Scripter, key, value string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{LockKey(key)}, value, "").Int64()
	return n == 1, err
}

// IsReply reports whether err is an error reply from the server (the command ran
// and failed, or was refused), as opposed to a failure to get any reply (network,
// timeout, ctx) after which the command's outcome is unknown.
func IsReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
