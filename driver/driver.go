// Package driver is what a backend implements to become a dlock.Locker.
//
// A backend holds only its store's algorithm: one attempt to take a lock (Driver),
// and the owner-checked refresh and release of a lock it took (Lock). Everything
// else — key and TTL validation, the retry loop, auto-renewal, the local validity
// deadline, Done/Err bookkeeping, observer calls, ending waits on Close — is written
// once in dlock.New. Optional interfaces, found by type assertion, let a backend wake
// waiters on release (Notifier), wait for a lock itself (Waiter), report a lock lost
// by its store (Sessioned), or say when the store started a lock's TTL (ValidFrom).
//
// Errors: a backend returns Busy when another owner holds the lock, dlock.ErrNotHeld
// when a refresh or release finds the lock is no longer ours, and anything else
// (wrapped with %w) for failures of the store. A backend never needs to return
// dlock.ErrClosed, ErrInvalidKey or ErrInvalidTTL: dlock.New checks those first.
//
// What a backend does NOT have to do: validate keys or TTLs, keep a lease's local
// validity deadline, retry, renew, or end its waits when the Locker closes (the
// context it is given is cancelled then).
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Driver is one client of a lock store. Safe for concurrent use.
type Driver interface {
	// TryLock makes one attempt to take key for ttl. When another owner holds key it
	// returns Busy(remaining). The key and the TTL have been validated (the TTL is at
	// least Info.MinTTL); the driver escapes the key as its store needs.
	TryLock(ctx context.Context, key string, ttl time.Duration) (Lock, error)
	// Close releases what the driver holds: the connections and clients it opened
	// (not those it was given), subscriptions, background goroutines. dlock.New calls
	// it once, when the Locker closes, after every wait has ended (their contexts are
	// cancelled first), every lease has been released or given up, and the calls
	// in flight (TryLock, Lock with its clean-up, Unlock, a Refresh the user called)
	// have returned — or 3s after Close began, if some have not; an automatic renewal
	// is cancelled, not waited for. Calls still running then fail on a closed driver,
	// and must not panic. It must not
	// block on a store that does not answer for longer than the store's own timeouts,
	// and must leave no goroutine of the driver's running once it returns. Locks still
	// held need not be released.
	Close() error
}

// Lock is one lock taken by TryLock or Waiter.Lock.
type Lock interface {
	// Token is the fencing token of this grant, 0 if the store cannot fence.
	Token() uint64
	// Refresh sets the lock's TTL to ttl from now if it is still ours; dlock.ErrNotHeld
	// if not; errors.ErrUnsupported if the store has no per-lock TTL.
	Refresh(ctx context.Context, ttl time.Duration) error
	// Unlock deletes the lock if it is still ours; dlock.ErrNotHeld if not.
	Unlock(ctx context.Context) error
}

// BusyError reports that another owner holds the lock: the one way a driver says
// "busy". dlock turns it into dlock.ErrNotAcquired (TryAcquire) or waits and tries
// again (Acquire).
type BusyError struct {
	// Remaining is how long the holder's lease has left as the store sees it, or 0
	// if unknown. A waiter does not wait longer than this before trying again.
	Remaining time.Duration
}

func (e *BusyError) Error() string {
	if e.Remaining > 0 {
		return "lock held by another owner for " + e.Remaining.String()
	}
	return "lock held by another owner"
}

// Busy returns a *BusyError with the holder's remaining time (0 if unknown).
func Busy(remaining time.Duration) error { return &BusyError{Remaining: remaining} }

// Notifier is implemented by a Driver that can tell waiters a lock may have been
// released, so that they need not poll.
type Notifier interface {
	// Subscribe starts listening for releases of key. The channel receives (it may
	// drop values when full, and may fire spuriously) whenever key may have become
	// free. Expiry need not be announced. stop ends the subscription and must be called.
	Subscribe(ctx context.Context, key string) (wake <-chan struct{}, stop func(), err error)
}

// Waiter is implemented by a Driver that waits for a lock itself: in a queue its store
// keeps (ZooKeeper's sequential nodes, etcd's revisions, the server's GET_LOCK queue,
// memlock's per-key queue), where waiters are served in the store's order, or by the
// wait loop of the library it adapts (a peer). dlock calls Lock for Acquire instead
// of its own retry loop over TryLock, unless the caller chose a retry strategy
// (dlock.WithRetry): that Acquire retries TryLock by it.
type Waiter interface {
	// Lock blocks until key is ours, ctx is done, or the store fails. dlock cancels
	// ctx when the Locker closes (context.Cause(ctx) is then dlock.ErrClosed), so a
	// Waiter needs no close handling of its own. When ctx ends, Lock must leave
	// nothing behind — no queued node, and no lock granted to it meanwhile — and
	// return an error wrapping ctx.Err(). A wait that gives up by a bound of its own
	// (a library's) returns Busy.
	Lock(ctx context.Context, key string, ttl time.Duration) (Lock, error)
}

// WaitErr returns a Waiter's error for err, which ended a wait under ctx: err
// wrapped in ctx.Err() when ctx has ended (as Waiter.Lock must return), else err as
// it is (nil stays nil).
func WaitErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// Sessioned is implemented by a Lock that its store can take away (a session that
// expires, a connection that dies). Lost is closed when the lock is gone, or may be;
// Cause then says why: a *LossError (possibly wrapped) says how the loss was learnt,
// any other error counts as a LossSession.
type Sessioned interface {
	Lost() <-chan struct{}
	Cause() error
}

// LossKind says how a Sessioned lock was lost (LossError).
type LossKind int

const (
	// LossSession: the store ended the session or closed the connection that held the
	// lock (a ZooKeeper session expired, a GET_LOCK connection killed or closed by a
	// restart). The lock may be free already.
	LossSession LossKind = iota + 1
	// LossDeleted: the store reported the lock's own record deleted or taken over while
	// the session lived (a ZooKeeper node or an etcd key deleted, an etcd lease
	// revoked). The lock may be free already.
	LossDeleted
	// LossSilent: nothing was reported — the client lost touch with its store (no
	// answer, a timeout) for so long that it gives the lock up. HeldUntil says until
	// when the store keeps it at least.
	LossSilent
	// LossExpired: the store reported that the lock's TTL ran out on its clock
	// before the client's own validity deadline (a client clock slower than the
	// store's by more than the drift allowance; a test store told to expire it, as
	// dlocktest's). The lease ends as at its deadline: dlock.CauseExpired, or
	// dlock.CauseUnreachable for an auto-renewed lease. The lock may be free already.
	LossExpired
)

// LossError is what a Sessioned lock's Cause returns (or wraps) to say how the lock
// was lost: what dlock's Lease.Err classifies (dlock.LossError) and what decides how
// a supervised command is stopped (dlock run kills it at once unless HeldUntil is
// still ahead).
type LossError struct {
	Kind LossKind
	// HeldUntil, for LossSilent, is the earliest moment, on this process's monotonic
	// clock, at which the store may free the lock (end the session) and grant it to
	// another owner; zero when that may have happened already.
	HeldUntil time.Time
	// Err says what happened.
	Err error
}

func (e *LossError) Error() string {
	if e.Err == nil {
		return "lock lost"
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *LossError) Unwrap() error { return e.Err }

// SessionDeadline is implemented by a Sessioned lock whose client can tell, while it
// is cut off from its store, the earliest moment at which the store may end the
// session and free the lock (ZooKeeper: a third of the negotiated session timeout,
// less drift, after the client last had its session). ok is false while the client
// is in touch with its store. Lost closes (LossSilent) at that deadline at the
// latest; dlock.Deadline reports it, so that a supervisor can warn and stop what the
// lock protects in time.
type SessionDeadline interface {
	SessionDeadline() (deadline time.Time, ok bool)
}

// ValidFrom is implemented by a Lock whose TTL did not start with the request that
// granted it — a waiter whose lease was kept alive in a queue (etcd). ValidFrom is a
// moment, read on this process's clock before the request that last set the TTL
// the store will honour for this lock; the local validity deadline is then
// ValidFrom + TTL − Drift(TTL) when that is later than counting from before the
// request (both bound the store's TTL from below, so the later one is used).
type ValidFrom interface {
	ValidFrom() time.Time
}

// Info describes a backend to the shared Locker.
type Info struct {
	// Name is the backend's name in errors and events, e.g. "redis".
	Name string
	// SessionTTL is true when locks last as long as a client session rather than a
	// per-lock TTL (ZooKeeper, GET_LOCK): no local validity deadline is kept, TTL
	// options are checked but not used, Refresh is unsupported, and loss is reported
	// through Sessioned.
	SessionTTL bool
	// Drift is the clock drift allowed for a TTL: the local validity deadline is
	// TTL − Drift(TTL) after the start of the request that set the TTL. Nil means
	// StandardDrift.
	Drift func(ttl time.Duration) time.Duration
	// MinTTL is the shortest TTL the store can honour; shorter ones are ErrInvalidTTL.
	MinTTL time.Duration
}

// SessionAnswerWait is how long a session lock's check — a ping, every interval, of
// the connection that holds the lock — waits for its answer before the lease is given
// up as unreachable, on a server that ends a silent session idle after the last
// request it heard (idle 0: never). That is at the earliest the start of the last
// check that was answered, and the next check starts an interval later: waiting
// idle/2 − interval gives the lease up at least half the session timeout before the
// server may free the lock — the holder's time to stop what the lock protects, and
// room for a late timer on a loaded machine — while a busy server's or link's late
// answer, up to that wait, is no loss. The wait is at least an interval (with the
// interval at most a third of idle, the lease then ends an interval before the
// server may free the lock) and at most MaxSessionAnswerWait, where idle allows more
// or is 0: a dead link is reported within seconds, not hours.
func SessionAnswerWait(interval, idle time.Duration) time.Duration {
	w := idle/2 - interval
	if idle <= 0 || w > MaxSessionAnswerWait {
		w = MaxSessionAnswerWait
	}
	return max(interval, w)
}

// MaxSessionAnswerWait bounds SessionAnswerWait.
const MaxSessionAnswerWait = 10 * time.Second

// StandardDrift is the clock drift allowed for a TTL when Info.Drift is nil: 1% of the
// TTL plus 2ms, as the Redlock description does. (Named for what it computes: Default*
// names in dlock are values, never functions.)
func StandardDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }
