// Package redisops holds what the two Redis backends genuinely share: the
// single-node lock operations that backends/redislock runs on one Redis deployment
// and backends/redlock runs on each of its independent masters — the key layout of a
// lock and its fencing counter (keys.go), the acquire, refresh and release scripts
// and the calls that run them (this file), release notifications (Releases), and the
// deployment check of one server (Inspect). It lives here, not in either backend,
// because both run these exact scripts on the same keys: a lock taken through one is
// seen by the other. What only redislock runs (the fair mode, sets of keys,
// semaphores and read-write locks, elections) lives in backends/redislock, scripts
// included.
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
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/driver"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed refresh.lua
	refreshSrc string
	//go:embed release.lua
	releaseSrc string

	// LuaLib defines the Lua functions the scripts of the Redis backends share
	// (endLease; dropGone, leaveQueue and joinQueue, which keep a key's queue of
	// waiters: see lib.lua), for a script that uses them to put in front of its
	// own text.
	//go:embed lib.lua
	LuaLib string

	acquireScript = redis.NewScript(acquireSrc)
	refreshScript = redis.NewScript(refreshSrc)
	releaseScript = redis.NewScript(LuaLib + releaseSrc)
)

// NewValue returns a new owner value: 128 random bits as 32 lowercase hex digits.
func NewValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// NewOwner returns a new owner value for a claim made under ctx: NewValue's 32
// hex digits, followed by the holder record ctx carries (driver.AppendHolder: a
// newline and its JSON) when the caller gave one with dlock.WithHolder. Scripts
// compare owner values whole, so the record costs bytes, not a round trip;
// OwnerOf takes it apart again.
func NewOwner(ctx context.Context) string { return driver.AppendHolder(ctx, NewValue()) }

// OwnerOf splits an owner value into the owner's random part and the holder record
// it carries (nil if none).
func OwnerOf(value string) (owner string, h *driver.Holder) { return driver.CutHolder(value) }

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
		return 0, 0, false, fmt.Errorf("acquire script returned %v, want 2 integers", res)
	}
	if res[0] == 1 {
		if res[1] <= 0 {
			return 0, 0, false, fmt.Errorf("fencing counter %q returned %d", FenceKey(key), res[1])
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
//
// Idempotent: it leaves a tombstone (ReleasedKey) for as long as the lock had left
// to live, and a Release of the same value run again — go-redis retries a command
// whose reply was lost with its connection, or the caller retries a Release that
// failed — returns true again rather than "gone": a release whose reply was lost
// is not mistaken for a lock lost to someone else.
func Release(ctx context.Context, c redis.Scripter, key, value string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{LockKey(key), ReleasedKey(key, value)}, value, Channel(key)).Int64()
	return n == 1, err
}

// Withdraw is Release without the announcement: it deletes key's lock if it still
// holds value and wakes no one. For a grant taken back before anyone could use it
// (a Redlock attempt that lost its vote), where the lock was never free for waiters
// to hear about.
func Withdraw(ctx context.Context, c redis.Scripter, key, value string) (bool, error) {
	n, err := releaseScript.Run(ctx, c, []string{LockKey(key), ReleasedKey(key, value)}, value, "").Int64()
	return n == 1, err
}

// IsReply reports whether err is an error reply from the server (the command ran
// and failed, or was refused), as opposed to a failure to get any reply (network,
// timeout, ctx) after which the command's outcome is unknown.
func IsReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// Processor runs any command: a client, a Cluster client, a connection.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// RunScript sends args — EVALSHA, a script's SHA1, the number of keys, the keys,
// the arguments: a command laid out once and sent as it is, without the boxing of
// each key and argument that redis.Script.Run repeats at every call — on c and
// returns the script's reply. When the server does not have the script (NOSCRIPT:
// a first request, a restart, SCRIPT FLUSH) it sends src, the script's text, with
// EVAL, as redis.Script.Run does, from a copy of args: RunScript never writes args,
// so requests to several servers may share them.
func RunScript(ctx context.Context, c Processor, args []any, src string) (any, error) {
	v, err := processScript(ctx, c, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		a := slices.Clone(args)
		a[0], a[1] = "eval", src
		v, err = processScript(ctx, c, a)
	}
	return v, err
}

// processScript sends the script command args on c (the keys from the fourth
// argument on, which a Redis Cluster client routes by).
func processScript(ctx context.Context, c Processor, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	err := c.Process(ctx, cmd)
	return cmd.Val(), err
}
