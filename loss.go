package dlock

import (
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Cause says why a lease ended without its owner's Release (or Close): the Cause
// field of the *LossError that Lease.Err returns then.
type Cause int

const (
	// CauseExpired: the lease reached its local validity deadline without
	// auto-renewal (WithAutoRenew), or its store reported the lock's TTL run out
	// before that deadline (driver.LossExpired). Err is ErrExpired.
	CauseExpired Cause = iota + 1
	// CauseUnreachable: the store did not confirm that the lock is still held before
	// the lease's deadline — renewals failed or went unanswered until the validity
	// deadline (a partition, a hung store; or the store reported the TTL of an
	// auto-renewed lease run out: driver.LossExpired), or a session lease's client
	// was cut off from its store for as long as its session may last. The lock may
	// still be held on the store until LossError.HeldUntil. Err is ErrLost.
	CauseUnreachable
	// CauseRefused: a refresh or a release found that the store no longer holds the
	// lock for this owner: it expired there, was deleted, or was taken by another
	// owner. Err is ErrLost.
	CauseRefused
	// CauseDeleted: the store reported the lock's record deleted or taken over while
	// it was held (a ZooKeeper node or an etcd key deleted, an etcd lease revoked), as
	// a watch saw it. Err is ErrLost.
	CauseDeleted
	// CauseSession: the store ended the session or closed the connection that held
	// the lock (a ZooKeeper session expired or replaced, a GET_LOCK connection killed
	// or closed by a server restart). Err is ErrLost.
	CauseSession
)

// String returns the cause's name: "expired", "unreachable", "refused", "deleted",
// "session ended".
func (c Cause) String() string {
	switch c {
	case CauseExpired:
		return "expired"
	case CauseUnreachable:
		return "unreachable"
	case CauseRefused:
		return "refused"
	case CauseDeleted:
		return "deleted"
	case CauseSession:
		return "session ended"
	}
	return "unknown"
}

// LossError is the error Lease.Err returns for a lease that ended without its
// owner's Release or the Locker's Close: it says why (Cause) and, through Unwrap,
// what the backend reported. errors.Is(err, ErrExpired) holds for CauseExpired and
// errors.Is(err, ErrLost) for every other cause; errors.As(err, &lossErr) finds it
// under the errors Release and Refresh return for a lease that ended.
//
// Not guaranteed: that the lock is free on the store when the lease ends (see
// HeldUntil), nor, for the causes the store reported, that nobody held it before the
// holder learnt of the loss — a store cannot tell a holder at the moment it deletes
// the lock.
type LossError struct {
	Cause Cause
	// HeldUntil, when not zero, is the earliest moment, on this process's monotonic
	// clock, at which the store may free the lock and grant it to someone else: the
	// lease ended early, on a loss this client inferred (a GET_LOCK connection that
	// stopped answering, whose server keeps the lock until its wait_timeout). Zero
	// when the lock may be free already: the store reported the loss, or the
	// validity deadline has passed.
	HeldUntil time.Time
	// Err is what the backend reported, or what the lease saw; nil if nothing more.
	Err error
}

func (e *LossError) Error() string {
	var s string
	if e.Cause == CauseExpired {
		s = ErrExpired.Error()
	} else {
		s = ErrLost.Error() + ": " + e.Cause.String()
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns Err.
func (e *LossError) Unwrap() error { return e.Err }

// Is reports whether target is ErrExpired (for CauseExpired) or ErrLost (for the
// other causes).
func (e *LossError) Is(target error) bool {
	if e.Cause == CauseExpired {
		return target == ErrExpired
	}
	return target == ErrLost
}

// lossOf classifies what a Sessioned lock's Cause reported (see driver.LossError).
// autoRenew: the lease renews itself (an expiry is then a loss: CauseUnreachable,
// as at its deadline).
func lossOf(cause error, autoRenew bool) *LossError {
	le := &LossError{Cause: CauseSession, Err: cause}
	var dl *driver.LossError
	if errors.As(cause, &dl) {
		switch dl.Kind {
		case driver.LossDeleted:
			le.Cause = CauseDeleted
		case driver.LossExpired:
			le.Cause = CauseExpired
			if autoRenew {
				le.Cause = CauseUnreachable
			}
		case driver.LossSilent:
			le.Cause = CauseUnreachable
			if time.Now().Before(dl.HeldUntil) {
				le.HeldUntil = dl.HeldUntil
			}
		}
	}
	return le
}
