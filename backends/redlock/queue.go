// The waiting Acquire (driver.Waiter): waiters queue on every master, and a release
// wakes the first of them alone, so a hand-off costs the same few requests however
// many wait.

package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

var (
	//go:embed wait.lua
	waitSrc    string
	waitScript = newScript(redisops.LuaLib + waitSrc)
	//go:embed release.lua
	releaseSrc    string
	releaseScript = newScript(redisops.LuaLib + releaseSrc)
)

// queuePrefix starts the key of each lock's queue of waiters on a master,
// deadlinePrefix the key of their deadlines (wait.lua), and wokenPrefix the key
// that names the waiter the last release woke (release.lua).
const (
	queuePrefix    = "dlock:rlqueue\xff"
	deadlinePrefix = "dlock:rlqdead\xff"
	wokenPrefix    = "dlock:rlwoken\xff"
)

// reservedPrefix starts the value a release leaves on a master's lock key, instead
// of deleting it, for a woken waiter that had been passed over (release.lua): the
// waiter's name follows. No owner value starts with it.
const reservedPrefix = "\xffwoken "

// queueKey returns the key of key's queue of waiters on a master (a sorted set:
// waiter name → arrival), and deadlineKey that of their deadlines (waiter name →
// server time in ms), both in key's Redis Cluster hash slot.
func queueKey(key string) string    { return redisops.Tagged(queuePrefix, key) }
func deadlineKey(key string) string { return redisops.Tagged(deadlinePrefix, key) }

// wokenKey returns the key that names the waiter the last release of key woke on a
// master (release.lua), in key's hash slot.
func wokenKey(key string) string { return redisops.Tagged(wokenPrefix, key) }

// queued is one waiting Acquire's place in key's queue: the same name and arrival
// on every master, so that every master's queue has the waiters in the same order
// and every master's release wakes the same one.
type queued struct {
	name    string
	arrival int64    // microseconds since the epoch on this client's clock, when the wait began
	keys    []string // the lock, the queue, the deadlines, the last woken waiter's name
}

// newQueued is a place for a wait on key that began at arrival.
func newQueued(key string, arrival time.Time) *queued {
	return &queued{name: redisops.NewValue(), arrival: arrival.UnixMicro(),
		keys: []string{redisops.LockKey(key), queueKey(key), deadlineKey(key), wokenKey(key)}}
}

// releaseCall lays out release.lua for key, value and waiter (see release), once
// for every master of a round; reserve is how long a reservation for a woken
// waiter that was passed over lasts (the per-node timeout).
func releaseCall(key, value, waiter string, reserve time.Duration) scriptCall {
	keys, channel := releaseKeys(key, value)
	return newCall(releaseScript, keys[:], value, channel, waiter, "0", redisops.Millis(reserve))
}

// releaseKeys returns release.lua's keys for value's lease on key — the lock,
// redisops.ReleasedKey, queueKey, deadlineKey and wokenKey — and redisops.Channel,
// cut from one string: two allocations a release instead of six.
func releaseKeys(key, value string) (keys [5]string, channel string) {
	t := redisops.Tagged("", key) // "{tag}" + key: what each tagged key's prefix is put before
	all := redisops.ReleasedPrefix + t + "\xff" + value + redisops.ChannelPrefix + key +
		queuePrefix + t + deadlinePrefix + t + wokenPrefix + t
	cut := func(n int) string {
		part := all[:n]
		all = all[n:]
		return part
	}
	keys[0] = redisops.LockKey(key)
	keys[1] = cut(len(redisops.ReleasedPrefix) + len(t) + 1 + len(value))
	channel = cut(len(redisops.ChannelPrefix) + len(key))
	keys[2] = cut(len(queuePrefix) + len(t))
	keys[3] = cut(len(deadlinePrefix) + len(t))
	keys[4] = all
	return keys, channel
}

// release runs call (releaseCall) on c: it deletes key's lock if it holds value
// (value "" deletes nothing), takes waiter (if not "") out of key's queue (and a
// reservation for it off the lock), and wakes the first waiter when the lock is
// then free — reserving the lock for it if an earlier release woke it already and
// someone else took the lock meanwhile. It reports whether value's lock was
// deleted, by this call or an earlier one.
func release(ctx context.Context, c redis.UniversalClient, call scriptCall) (bool, error) {
	if _, ok := c.(*redis.ClusterClient); ok {
		call = call.with(3, "1") // release.lua's ARGV[4]: a Cluster node
	}
	v, err := call.run(ctx, c)
	if err != nil {
		return false, err
	}
	n, ok := v.(int64)
	if !ok {
		return false, fmt.Errorf("redlock: release.lua replied %T, want an integer", v)
	}
	return n == 1, nil
}

var _ driver.Waiter = (*redlockDriver)(nil)

// Lock waits for key in its queue of waiters on every master (dlock calls it for
// Acquire without a retry strategy). Its first attempt is TryLock's round (steps
// 1–4, the tie-break included), so an uncontended Acquire costs what TryAcquire
// costs. After a refusal the caller listens on its own channel on every master,
// where a release tells the first waiter of the queue alone, and each further
// attempt is the same round with wait.lua, which also puts the caller in the queue
// (at the time its wait began) or renews its place there. It looks again
// when told, at each renewal of its place (every third of ttl: a waiter that stops
// renewing, a crashed process, is dropped at its deadline, ttl after its last
// look), and when the holder's TTL runs out. When ctx ends it leaves the queue on
// every master (and tells the next waiter if the lock is free) and returns ctx's
// error; a grant taken meanwhile is given back by step 4.
//
// Barging is bounded: a caller that asks while the lock is free takes it, ahead of
// the woken waiter, which stays first and is woken by the next release — and that
// release reserves the lock for it on each master (release.lua): nobody else is
// granted there until the waiter takes it, leaves the queue, or the per-node
// timeout of the releasing Locker passes (each later release that wakes it
// reserves it again until it is granted). A waiter at the head of the queue is so
// passed over once, and after that only by callers that come while a reservation
// for it has expired unused.
//
// Not guaranteed: the order among waiters not yet first, a reservation on a master
// whose queue differs (a waiter not yet queued there, or dropped), and a wake-up: a
// message lost (a master down, a reconnection) or meant for a waiter that has
// crashed costs a wait of up to a third of ttl; a reservation for a crashed waiter
// holds the lock free for up to the per-node timeout.
func (d *redlockDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	arrival := time.Now()
	var q *queued // the place in the queue, from the second attempt on
	lk, held, err := d.tryLock(ctx, key, ttl, nil)
	var wake <-chan struct{}
	contended := 0 // rounds in a row lost without a holder
	for i := 0; ; i++ {
		if lk != nil {
			return lk, nil
		}
		var busy *driver.BusyError
		if !errors.As(err, &busy) {
			d.leave(key, q, ttl)
			return nil, driver.WaitErr(ctx, err)
		}
		if i == 0 {
			// Refused: listen for our turn, then look again at once, queueing (the
			// release may have come before the subscription).
			q = newQueued(key, arrival)
			w, stop, _ := d.subscribe(func(r *redisops.Releases) (<-chan struct{}, func(), error) {
				return r.SubscribeTurn(ctx, key, q.name)
			})
			defer stop()
			wake = w
		} else {
			delay := max(ttl/3, time.Millisecond)
			if busy.Remaining > 0 {
				delay = min(delay, busy.Remaining+time.Millisecond)
			}
			if held {
				contended = 0
			} else {
				// No holder to announce a release: a split vote that nobody won, or
				// grants not yet withdrawn. Look again after a short random delay.
				contended++
				delay = min(delay, dlock.DefaultRetry.Backoff(contended))
			}
			t := time.NewTimer(delay)
			select {
			case <-wake:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if ctx.Err() != nil {
			d.leave(key, q, ttl)
			return nil, ctx.Err()
		}
		lk, held, err = d.tryLock(ctx, key, ttl, q)
	}
}

// leave takes q out of key's queue on every master, best effort, with a fresh
// context, and waits for the answers (at most the round's longest): what it misses
// is dropped at q's deadline.
func (d *redlockDriver) leave(key string, q *queued, ttl time.Duration) {
	if q == nil {
		return // never queued
	}
	timeout := d.nodeTimeout(ttl)
	call := releaseCall(key, "", q.name, timeout)
	r := d.pollAll(context.Background(), timeout, releaseWait{until: time.Now().Add(ttl)}, func(ctx context.Context, i int) vote {
		return voteOf(release(ctx, d.nodes[i].c, call))
	})
	waitAtMost(r.settled, max(timeout, FirstContactTimeout))
}
