// Package dlock is a distributed-lock framework: one small interface, Locker, with
// several backends (in-memory, Redis, Redlock, MySQL, ZooKeeper, etcd) that all pass
// one conformance suite (package conformance).
//
// A Locker hands out Leases. A Lease is one grant of one named lock to one owner: it
// carries a fencing token, can be refreshed and released, and tells through Done and
// Err when it has ended — released, lost, or past its validity as measured by this
// process's monotonic clock.
//
// What no lock service can promise: a holder that is paused (GC, SIGSTOP, a slow
// disk) for longer than its lease keeps running after its lease has ended, and a
// second holder may already be inside. Protect the resource itself with the fencing
// token (Lease.Token) where the backend provides one; see docs/tradeoffs.md.
//
// Backends are picked by constructor (memlock.New, redislock.New, …) or by URL with
// Open after a blank import of the backend package.
//
// Beyond the mutex, NewSemaphore (at most n leases on a key at once) and NewRWMutex
// (shared leases together, an exclusive one alone) hand out the same Lease from the
// same Locker, on every backend that declares them (docs/semaphores.md,
// docs/rwlocks.md).
package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Locker hands out leases on named locks from one backend. Safe for concurrent use.
//
// Keys are valid UTF-8 strings of 1 to 255 bytes (ValidateKey); every backend accepts
// every such key, and two different keys are always two different locks.
type Locker interface {
	// Acquire blocks until it holds the lock named key, ctx is done, or the backend fails.
	// It returns ErrInvalidKey or ErrInvalidTTL for bad input, ErrClosed after Close,
	// ErrNotAcquired (joined with ctx.Err()) when ctx ends first or the retry strategy
	// gives up, and backend errors wrapped with %w.
	Acquire(ctx context.Context, key string, opts ...Option) (Lease, error)
	// TryAcquire makes one attempt; ErrNotAcquired if another owner holds key.
	// Other errors are as for Acquire.
	TryAcquire(ctx context.Context, key string, opts ...Option) (Lease, error)
	// Close ends this client: waiting calls return ErrClosed, leases it still holds
	// end with ErrClosed, then are released (best effort, within 1s: a lease's Done
	// closes before the store can grant its lock to another client), and the calls
	// still in flight (Acquire, TryAcquire, Release, Refresh) are waited for
	// — a cancelled wait's clean-up of the store's queue included, and a lock granted
	// while Close runs is released, not left to its TTL — up to 3s from the start of
	// Close; then the client's connections are closed. Later calls return ErrClosed.
	// Close returns within 4s even when the store does not answer, and is idempotent.
	// A lease whose release did not reach the backend, or a clean-up still unanswered
	// after 3s, stays on the store until its TTL or session ends.
	Close() error
}

// Lease is one grant of one lock to one owner. Safe for concurrent use.
type Lease interface {
	// Key is the name of the lock, as given to Acquire.
	Key() string
	// Token is the fencing token: for one key, a later grant has a larger token, as
	// long as the store kept every write it acknowledged — after an asynchronous
	// failover (Redis with a replica) a token can be handed out again. It is 0 where
	// the backend cannot fence. A token only protects a resource that checks it:
	// refuses 0, refuses a token below the highest it has accepted, and refuses an
	// equal one from another writer (docs/fencing.md).
	Token() uint64
	// Refresh extends the lease to ttl from now. It returns ErrNotHeld if the lease is
	// no longer ours (then Done closes with ErrLost), ErrInvalidTTL for ttl <= 0 or above MaxTTL,
	// errors.ErrUnsupported where the backend has no per-lease TTL, and backend errors
	// (the lease is then unchanged and ends at its old validity deadline).
	Refresh(ctx context.Context, ttl time.Duration) error
	// Release gives the lock up. Only the owner's lease can release it; it returns
	// ErrNotHeld if the lease had expired, was lost, or was already released. A backend
	// error leaves the lease as it was (it may be retried); the lock then frees at the
	// end of its TTL or session.
	Release(ctx context.Context) error
	// Done is closed when the lease ends: released, lost (session gone, renewal
	// failed), or past its validity as measured conservatively by this client's
	// monotonic clock (TTL minus clock drift, counted from before the request that
	// granted or refreshed it).
	Done() <-chan struct{}
	// Err is nil while the lease is held, then says why Done closed: ErrReleased,
	// ErrClosed, or — for a lease that ended without its owner — a *LossError whose
	// Cause says why (expired, unreachable, refused, deleted, session ended) and that
	// errors.Is matches with ErrExpired or ErrLost.
	Err() error
}

// Sentinel errors. Test for them with errors.Is; backends wrap them with detail.
var (
	// ErrNotAcquired: the lock is held by another owner (TryAcquire), or Acquire gave up.
	ErrNotAcquired = errors.New("dlock: lock not acquired")
	// ErrNotHeld: the lease is no longer held (expired, lost, released, or taken over).
	ErrNotHeld = errors.New("dlock: lock not held")
	// ErrLost: a held lease ended without Release (Lease.Err is then a *LossError
	// that matches it, whose Cause says why): its session ended, a renewal found
	// the lock gone, or renewals failed until the validity deadline.
	ErrLost = errors.New("dlock: lease lost")
	// ErrExpired: a lease without auto-renewal reached its validity deadline.
	ErrExpired = errors.New("dlock: lease expired")
	// ErrReleased: the lease ended because its owner released it.
	ErrReleased = errors.New("dlock: lease released")
	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("dlock: locker closed")
	// ErrInvalidKey: the key is empty, longer than MaxKeyLen bytes, or not valid UTF-8.
	ErrInvalidKey = errors.New("dlock: invalid key")
	// ErrInvalidTTL: the TTL is zero, negative, below the backend's minimum or above
	// MaxTTL.
	ErrInvalidTTL = errors.New("dlock: invalid ttl")
	// ErrUnavailable: the backend cannot currently decide (e.g. Redlock cannot reach a
	// quorum of its nodes).
	ErrUnavailable = errors.New("dlock: backend unavailable")
	// ErrInvalidURL: Open was given a URL it cannot use (unknown scheme, unknown query
	// parameter, bad host list); the message names what was wrong.
	ErrInvalidURL = errors.New("dlock: invalid url")
	// ErrConflict: the key is in use as another kind of lock (a mutex, a semaphore, a
	// read-write lock, an election), or as a semaphore with another limit. Nothing
	// was granted.
	ErrConflict = errors.New("dlock: key in use with other settings")
)

// MaxKeyLen is the longest key in bytes.
const MaxKeyLen = 255

// DefaultTTL is the lease TTL when Acquire is called without WithTTL.
const DefaultTTL = 10 * time.Second

// ValidateKey returns nil for a usable key and an error wrapping ErrInvalidKey that
// says what is wrong otherwise. Usable keys are valid UTF-8 of 1..MaxKeyLen bytes; any
// such key (slashes, dots, quotes, NUL, emoji) is a lock name of its own.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidKey, key)
	}
	return nil
}

// MaxTTL is the longest TTL a Locker accepts: a century, below what every store
// can represent (etcd's longest lease is 9e9 s, about 285 years; MySQL's DATETIME
// ends in 9999; a TTL within 1ms of the largest Duration has no whole number of
// milliseconds for Redis's PX).
const MaxTTL = 100 * 365 * 24 * time.Hour

// ValidateTTL returns nil for 0 < ttl <= MaxTTL and an error wrapping ErrInvalidTTL
// otherwise.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return fmt.Errorf("%w: %v (must be > 0)", ErrInvalidTTL, ttl)
	case ttl > MaxTTL:
		return fmt.Errorf("%w: %v is above MaxTTL (%v)", ErrInvalidTTL, ttl, MaxTTL)
	}
	return nil
}

// Deadline returns the local validity deadline of a lease that has a per-lease TTL:
// the moment, on this process's monotonic clock, at which its Done closes unless a
// refresh moves it (TTL minus the clock-drift allowance, counted from before the
// request that last set the TTL). The store frees the lock no earlier. For a lease
// that lasts as long as a session it is the session's deadline while the client is
// cut off from its store, where the backend knows it (ZooKeeper: a third of the
// negotiated session timeout, less drift, after the client last had its session —
// the earliest the ensemble may expire it); ok is false while the client is in touch
// with its store, for session leases whose backend cannot tell (GET_LOCK), and for a
// Lease not made by this package. The deadline moves with every refresh and
// reconnection; read it again.
func Deadline(l Lease) (deadline time.Time, ok bool) {
	if d, is := l.(interface{ Deadline() (time.Time, bool) }); is {
		return d.Deadline()
	}
	return time.Time{}, false
}
