package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// GateIndex is the index of key's gate among n masters (tiebreak.go).
func GateIndex(key string, n int) int { return gateIndex(key, n) }

// QueueKey is the key of key's queue of waiters on a master (queue.go).
func QueueKey(key string) string { return queueKey(key) }

// DeadlineKey is the key of the deadlines of key's waiters on a master (queue.go).
func DeadlineKey(key string) string { return deadlineKey(key) }

// WokenKey is the key that names the waiter the last release of key woke on a
// master, and ReservedPrefix starts the value of a lock reserved for a woken waiter
// (release.lua).
func WokenKey(key string) string { return wokenKey(key) }

const ReservedPrefix = reservedPrefix

// Release runs release.lua on c for key: it deletes value's lease ("" none), takes
// waiter ("" none) out of the queue, and wakes the first waiter, reserving the lock
// for reserve if that waiter was woken before.
func Release(ctx context.Context, c redis.UniversalClient, key, value, waiter string, reserve time.Duration) (bool, error) {
	return release(ctx, c, releaseCall(key, value, waiter, reserve))
}

// WaitVote runs wait.lua on c for key: the vote of the waiter named name (arrived
// now) for value, with a TTL of ttl; true if granted.
func WaitVote(ctx context.Context, c redis.UniversalClient, key, value, name string, ttl time.Duration) (bool, error) {
	q := newQueued(key, time.Now())
	q.name = name
	res, err := voteCall(key, value, ttl, q).run(ctx, c)
	return res == int64(1), err
}

// VoteHash and WaitHash are the SHA1 digests of vote.lua and wait.lua, as EVALSHA
// names them.
var VoteHash, WaitHash = voteScript.hash, waitScript.hash

// NewWithIdle is New, and a function that waits until none of the Locker's requests
// to its masters is in flight (the caller starts no new ones meanwhile).
func NewWithIdle(clients []redis.UniversalClient, opts ...Option) (dlock.Locker, func()) {
	l, d := newLocker(clients, opts)
	return l, d.inflight.Wait
}
