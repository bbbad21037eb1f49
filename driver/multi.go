package driver

import (
	"context"
	"time"
)

// MultiLocker is implemented by a Driver that takes a set of keys in one atomic step
// of its store (one Redis script, one etcd transaction, one SQL statement).
// dlock.AcquireAll and TryAcquireAll use it for each attempt; without it (or when it
// returns errors.ErrUnsupported) dlock takes the keys one by one in sorted order
// and gives back those it took when one is busy.
//
// The locks it takes are the same locks a mutex on each key takes: a set on {a, b}
// and a mutex on a exclude each other.
type MultiLocker interface {
	// TryLockAll takes every key for ttl, or none: Busy when one of them is held. The
	// keys are validated, distinct and sorted. It returns an error wrapping
	// errors.ErrUnsupported, having taken nothing, for a set the store cannot take in
	// one step (keys in different Redis Cluster slots). The Lock it returns is a
	// SetLock: its Refresh and Unlock act on every key, and its Token is the largest
	// of the keys' tokens.
	TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (Lock, error)
}

// SetLock is a Lock on a set of keys.
type SetLock interface {
	Lock
	// Tokens returns each key's fencing token, in the order of the keys the set was
	// taken with (0 where the store cannot fence).
	Tokens() []uint64
}

// MultiWaiter is implemented by a MultiLocker whose store queues a waiting set of
// keys in the queue of every key at once, so that the set is not passed over for
// ever by waiters of single keys or other sets. dlock.AcquireAll waits with it when
// the driver is also a Waiter and the caller gave no retry strategy (a driver that
// is not a Waiter is retried, and this method is not called); without it, a Waiter
// waits in one key's queue at a time, holding nothing, and a set may be overtaken
// for as long as its keys are busy.
type MultiWaiter interface {
	// LockAll blocks until every key is ours at once, ctx is done, or the store
	// fails, as Waiter.Lock does for one key (it leaves nothing behind when ctx
	// ends). The keys are as TryLockAll's. It returns an error wrapping
	// errors.ErrUnsupported, having taken and queued nothing, for a set the store
	// cannot take in one step; dlock then waits key by key.
	LockAll(ctx context.Context, keys []string, ttl time.Duration) (Lock, error)
}
