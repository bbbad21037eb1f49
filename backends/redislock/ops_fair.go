package redislock

import (
	"context"
	"fmt"
	"strings"
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

// fairKeys are the keys fair.lua works on for key and the owner value: the lock,
// its fencing counter, the queue, the deadlines and the release's tombstone.
func fairKeys(key, value string) []string {
	names, _ := fairNames(key, value)
	return names[:]
}

// fairNames returns fairKeys(key, value) and key's release channel
// (redisops.Channel), all cut from one string: a cycle makes them with two
// allocations rather than six. The suffix of every tagged key is Tagged("", key).
func fairNames(key, value string) (keys [5]string, channel string) {
	tagged := redisops.Tagged("", key)
	prefixes := [...]string{redisops.FencePrefix, queuePrefix, deadlinePrefix, redisops.ReleasedPrefix}
	n := len(redisops.ChannelPrefix) + len(key) + len(value) + 1
	for _, p := range prefixes {
		n += len(p) + len(tagged)
	}
	var b strings.Builder
	b.Grow(n)
	var ends [len(prefixes)]int
	for i, p := range prefixes {
		b.WriteString(p)
		b.WriteString(tagged)
		ends[i] = b.Len()
	}
	b.WriteString("\xff")
	b.WriteString(value)
	released := b.Len()
	b.WriteString(redisops.ChannelPrefix)
	b.WriteString(key)
	s := b.String()
	keys[0] = redisops.LockKey(key)
	keys[1] = s[:ends[0]]
	keys[2] = s[ends[0]:ends[1]]
	keys[3] = s[ends[1]:ends[2]]
	keys[4] = s[ends[2]:released]
	return keys, s[released:]
}

// fairCall is one owner's commands of fair.lua on one key, with every argument
// boxed once, as a pointer into the struct (go-redis writes a *string or *int64
// through): a waiter asks many times and the release runs on the same keys, and
// go-redis's Eval would box each key and argument again at every call. One
// fairCall serves one Acquire and the release of what it granted; its commands are
// not run concurrently.
type fairCall struct {
	keys    [5]string
	channel string
	value   string
	ttl     int64 // the lease's TTL in ms, also the waiter's TTL
	window  int64 // the barging window in µs
	acquire [3 + 5 + 5]any
	release [3 + 5 + 3]any
}

// fairSHA is fair.lua's SHA1, boxed once, and fairSource its text.
var (
	fairSHA    any = fairScript.Hash()
	fairSource     = withLib("fair.lua")
)

func newFairCall(key, value string, ttl, window time.Duration) *fairCall {
	f := &fairCall{value: value, ttl: redisops.Millis(ttl), window: window.Microseconds()}
	f.keys, f.channel = fairNames(key, value)
	head := func(args []any) {
		args[0], args[1], args[2] = "evalsha", fairSHA, len(f.keys)
		for i := range f.keys {
			args[3+i] = &f.keys[i]
		}
	}
	head(f.acquire[:])
	f.acquire[9], f.acquire[10], f.acquire[11], f.acquire[12] = &f.value, &f.ttl, &f.ttl, &f.window
	head(f.release[:])
	f.release[9], f.release[10] = &f.value, &f.channel
	return f
}

// try runs fair.lua's 'try' (wait false) or 'wait' (see fairAcquire).
func (f *fairCall) try(ctx context.Context, c redis.Scripter, wait bool) (fairResult, error) {
	f.acquire[8] = "try"
	if wait {
		f.acquire[8] = "wait"
	}
	v, err := runFair(ctx, c, f.acquire[:])
	if err != nil {
		return fairResult{}, err
	}
	return parseFair(v)
}

// unlock runs fair.lua's 'release', or 'leave' with leave (see fairRelease).
func (f *fairCall) unlock(ctx context.Context, c redis.Scripter, leave bool) (bool, error) {
	f.release[8] = "release"
	if leave {
		f.release[8] = "leave"
	}
	v, err := runFair(ctx, c, f.release[:])
	n, _ := v.(int64)
	return err == nil && n == 1, err
}

// runFair sends args, an EVALSHA of fair.lua, on c (a client or a connection, both of
// which run any command: redisops.RunScript).
func runFair(ctx context.Context, c redis.Scripter, args []any) (any, error) {
	p, ok := c.(redisops.Processor)
	if !ok {
		return nil, fmt.Errorf("redislock: %T cannot run fair.lua", c)
	}
	return redisops.RunScript(ctx, p, args, fairSource)
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
// ttl: unless it asks again within ttl it is dropped. Without wait it only
// tries. Like Acquire, the script increments the fencing counter on a grant, is
// idempotent for a value that already holds the lock, and may have run when an
// error other than a reply error comes back. (A caller that asks more than once
// keeps a fairCall.)
func fairAcquire(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration, wait bool, window time.Duration) (fairResult, error) {
	return newFairCall(key, value, ttl, window).try(ctx, c, wait)
}

// parseFair reads fair.lua's answer to 'try' and 'wait'.
func parseFair(v any) (fairResult, error) {
	a, _ := v.([]any)
	var res [4]int64
	for i := 0; i < len(a) && i < len(res); i++ {
		res[i], _ = a[i].(int64)
	}
	switch {
	case len(a) == 2 && res[0] == 1 && res[1] > 0:
		return fairResult{Acquired: true, Token: uint64(res[1])}, nil
	case len(a) == 4 && res[0] == 0:
		return fairResult{Free: res[1] == 0, Holder: max(time.Duration(res[1])*time.Millisecond, 0), Place: int(res[2]),
			HeadDeadline: time.Duration(res[3]) * time.Millisecond}, nil
	}
	return fairResult{}, fmt.Errorf("fair acquire script returned %v", v)
}

// fairRelease deletes key's lock if it holds value and, when someone waits, tells
// the first waiter on Channel(key) (the message is its name); with leave it also
// takes value out of the queue (a wait that ended), and then tells the new first
// waiter if the lock is free. It reports whether it deleted the lock — also when it
// is run again after this owner's release already deleted it (a reply lost).
func fairRelease(ctx context.Context, c redis.Scripter, key, value string, leave bool) (bool, error) {
	return newFairCall(key, value, 0, 0).unlock(ctx, c, leave)
}
