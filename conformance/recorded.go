package conformance

import (
	"context"

	"github.com/dlock-go/dlock"
)

// The primitives as the suite's checks use them, recorded: a primitive reaches the
// Locker underneath its client (dlock's Unwrap), so its calls are recorded here, as
// the client's, with the key and kind of what they take.

// recSemaphore is a semaphore whose acquisitions are recorded.
type recSemaphore struct {
	*dlock.Semaphore
	h handle
}

func (s *recSemaphore) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return s.h.Acquire(ctx, opts...)
}

func (s *recSemaphore) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return s.h.TryAcquire(ctx, opts...)
}

// recRWMutex is a read-write lock whose acquisitions, of either side, are recorded.
type recRWMutex struct {
	*dlock.RWMutex
	ex, sh handle
}

func (m *recRWMutex) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.ex.Acquire(ctx, opts...)
}

func (m *recRWMutex) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.ex.TryAcquire(ctx, opts...)
}

func (m *recRWMutex) AcquireShared(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.sh.Acquire(ctx, opts...)
}

func (m *recRWMutex) TryAcquireShared(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return m.sh.TryAcquire(ctx, opts...)
}

// sharedSide is the shared side of a read-write lock, as the RWMutex offers it.
type sharedSide struct{ m *dlock.RWMutex }

func (h sharedSide) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.m.AcquireShared(ctx, opts...)
}

func (h sharedSide) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.m.TryAcquireShared(ctx, opts...)
}

// recElection is an election whose campaigns are recorded (a term is held like a key).
type recElection struct {
	*dlock.Election
	r      *recorder // nil: not recorded
	client string
}

func (e *recElection) Campaign(ctx context.Context, value string, opts ...dlock.Option) (dlock.Lease, error) {
	if e.r == nil {
		return e.Election.Campaign(ctx, value, opts...)
	}
	return e.r.grant(e.client, OpAcquire, Event{Key: e.Name(), Kind: "term"}, func() (dlock.Lease, error) { return e.Election.Campaign(ctx, value, opts...) })
}

func (e *recElection) TryCampaign(ctx context.Context, value string, opts ...dlock.Option) (dlock.Lease, error) {
	if e.r == nil {
		return e.Election.TryCampaign(ctx, value, opts...)
	}
	return e.r.grant(e.client, OpTry, Event{Key: e.Name(), Kind: "term"}, func() (dlock.Lease, error) { return e.Election.TryCampaign(ctx, value, opts...) })
}

// acquireAll and tryAcquireAll are dlock's, recorded for l's client.
func acquireAll(ctx context.Context, l dlock.Locker, keys []string, opts ...dlock.Option) (dlock.Lease, error) {
	return recordSet(l, OpAcquire, keys, func(inner dlock.Locker) (dlock.Lease, error) { return dlock.AcquireAll(ctx, inner, keys, opts...) })
}

func tryAcquireAll(ctx context.Context, l dlock.Locker, keys []string, opts ...dlock.Option) (dlock.Lease, error) {
	return recordSet(l, OpTry, keys, func(inner dlock.Locker) (dlock.Lease, error) { return dlock.TryAcquireAll(ctx, inner, keys, opts...) })
}

func recordSet(l dlock.Locker, op Op, keys []string, take func(dlock.Locker) (dlock.Lease, error)) (dlock.Lease, error) {
	rl, ok := l.(*recLocker)
	if !ok {
		return take(l)
	}
	return rl.r.grant(rl.name, op, Event{Kind: "set", Keys: append([]string(nil), keys...)}, func() (dlock.Lease, error) { return take(rl.Locker) })
}
