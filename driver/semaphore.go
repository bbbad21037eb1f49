package driver

import (
	"context"
	"time"
)

// The primitives beyond the mutex. A backend whose store can hold a counting
// semaphore or a read-write lock implements the optional interfaces below on its
// Driver; dlock.NewSemaphore and dlock.NewRWMutex find them by type assertion and
// run them under the same machinery as the mutex (validation, retries, deadline,
// renewals, Done/Err, Close). The Lock they return is refreshed and released like a
// mutex's, and may be Sessioned or ValidFrom.
//
// Keys: a primitive's store keys live in a namespace of their own, so that no
// mutex key names the same thing. A key in use as the other primitive, or as a
// semaphore with another limit, is refused with an error wrapping dlock.ErrConflict
// where the store can tell (nothing may be left granted or queued then). The limit
// a store records for a semaphore is the limit of its current holders (and queued
// waiters): once none is left, the next acquirer's limit holds.
//
// Wake-ups: a Notifier is asked to Subscribe to SemaphoreWake(key) or RWWake(key)
// by the waiters of a primitive; a driver announces its primitives' releases under
// those names.

// Semaphorer is implemented by a Driver whose store holds counting semaphores.
type Semaphorer interface {
	// TryLockSemaphore makes one attempt to take one of the limit permits of key's
	// semaphore for ttl: Busy when limit permits are held (or, in a store that
	// queues, when others wait), an error wrapping dlock.ErrConflict when the
	// semaphore is held with another limit or key is held as a read-write lock.
	// key and ttl are validated, and 1 <= limit <= dlock.MaxLimit.
	TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (Lock, error)
}

// SemaphoreWaiter is implemented by a Semaphorer whose store queues the waiters of a
// semaphore. LockSemaphore blocks until a permit is ours, as Waiter.Lock does for
// the mutex (same contract for ctx, Close and what is left behind), and returns
// the errors TryLockSemaphore returns other than Busy.
type SemaphoreWaiter interface {
	LockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (Lock, error)
}

// RWLocker is implemented by a Driver whose store holds read-write locks.
type RWLocker interface {
	// TryLockRW makes one attempt to take key's read-write lock for ttl, shared or
	// exclusive: Busy when an exclusive lease is held, when any lease is held and
	// exclusive is asked, or (in a store that queues) when others wait before us; an
	// error wrapping dlock.ErrConflict when key is held as a semaphore.
	TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (Lock, error)
}

// RWWaiter is implemented by an RWLocker whose store queues the waiters of a
// read-write lock, as Waiter does for the mutex.
type RWWaiter interface {
	LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (Lock, error)
}

// SemaphoreWake is the name a Notifier is asked to Subscribe to by the waiters of
// key's semaphore. It is not valid UTF-8, so it is never a mutex's key.
func SemaphoreWake(key string) string { return "\xffsemaphore\xff" + key }

// RWWake is the name a Notifier is asked to Subscribe to by the waiters of key's
// read-write lock. It is not valid UTF-8, so it is never a mutex's key.
func RWWake(key string) string { return "\xffrwlock\xff" + key }
