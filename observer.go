package dlock

import (
	"context"
	"time"
)

// EventKind says what an Event reports.
type EventKind int

const (
	// EventAcquire: an Acquire or TryAcquire call ended (Err nil when it granted a lease).
	EventAcquire EventKind = iota + 1
	// EventRenew: a refresh (explicit or automatic) ended (Err nil when it succeeded).
	EventRenew
	// EventEnd: a lease ended; Err says why (ErrReleased, ErrClosed, or a *LossError
	// matching ErrExpired or ErrLost, whose cause is also in Cause). It is observed
	// before the lease's Done closes.
	EventEnd
)

// Event is one observation. Fields not relevant to the Kind are zero.
type Event struct {
	Kind    EventKind
	Backend string // the backend's name, e.g. "redis"
	Key     string
	// Duration: for EventAcquire the time spent in the call; for EventRenew the time
	// the refresh took; for EventEnd how long the lease was held.
	Duration time.Duration
	// Attempts: for EventAcquire, how many times the backend was asked.
	Attempts int
	// Contended: for EventAcquire, whether the lock was found held at least once.
	Contended bool
	Err       error
	// Cause: for EventEnd of a lease that ended without its owner (Err is then a
	// *LossError), why — the LossError's Cause; 0 for a lease released or closed.
	Cause Cause
}

// Observer receives events from Lockers. Its Observe method is called synchronously on the
// caller's or a lease's goroutine and must be fast and safe for concurrent use. When
// no Observer is set nothing is measured.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

// Instrument returns a Locker that reports every call to l, and every lease it
// grants, to obs: it adds WithObserver(obs) before the options of each call (so an
// explicit WithObserver on one call replaces it). Closing it closes l.
func Instrument(l Locker, obs Observer) Locker {
	return observed{l, obs}
}

type observed struct {
	Locker
	obs Observer
}

func (o observed) Acquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return o.Locker.Acquire(ctx, key, append([]Option{WithObserver(o.obs)}, opts...)...)
}

func (o observed) TryAcquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return o.Locker.TryAcquire(ctx, key, append([]Option{WithObserver(o.obs)}, opts...)...)
}
