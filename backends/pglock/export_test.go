package pglock

import "time"

// SetCandidate replaces the candidate ids of keys (for a test that makes keys
// collide) and returns what puts the real ones back. The test's Lockers must be
// new: a Locker remembers the ids it has seen.
func SetCandidate(f func(key string, i int) int64) (restore func()) {
	old := candidate
	candidate = f
	return func() { candidate = old }
}

// Discard is discard: it drops a pooled connection whose session may hold locks.
var Discard = discard

// SetListenLinger sets how long a Locker keeps its listening connection after its
// last waiter, for Lockers made after it, and returns what puts it back.
func SetListenLinger(d time.Duration) (restore func()) {
	old := listenLinger
	listenLinger = d
	return func() { listenLinger = old }
}
