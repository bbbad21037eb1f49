package redlock

import (
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// GateIndex is the index of key's gate among n masters (tiebreak.go).
func GateIndex(key string, n int) int { return gateIndex(key, n) }

// QueueKey is the key of key's queue of waiters on a master (queue.go).
func QueueKey(key string) string { return queueKey(key) }

// DeadlineKey is the key of the deadlines of key's waiters on a master (queue.go).
func DeadlineKey(key string) string { return deadlineKey(key) }

// VoteHash and WaitHash are the SHA1 digests of vote.lua and wait.lua, as EVALSHA
// names them.
var VoteHash, WaitHash = voteScript.hash, waitScript.hash

// NewWithIdle is New, and a function that waits until none of the Locker's requests
// to its masters is in flight (the caller starts no new ones meanwhile).
func NewWithIdle(clients []redis.UniversalClient, opts ...Option) (dlock.Locker, func()) {
	l, d := newLocker(clients, opts)
	return l, d.inflight.Wait
}
