package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// RWMutex is a read-write lock: any number of shared leases on its key at once, or
// one exclusive lease alone. Its leases are Leases like a mutex's, and its
// acquires take the same options. Safe for concurrent use; an RWMutex holds no
// state of its own, so any number of them (in any number of processes) may share
// a key.
//
// A key's read-write lock is not its mutex: the store keeps them apart, and they
// never exclude each other. A key held as a semaphore refuses its read-write lock
// (and the other way round) with ErrConflict.
//
// Writer preference: on a backend that declares it (spec.Primitive.WriterPreference)
// a waiting exclusive acquirer keeps new shared acquirers out, so it gets in once
// the shared leases before it end, however many readers keep coming. Elsewhere a
// stream of overlapping shared leases can keep a writer out for as long as it
// lasts (spec.WriterProgress is then a declared weakness). A lease is not
// re-entrant: a holder of a shared lease that asks for another while a writer
// waits, on a backend with writer preference, waits behind that writer — and the
// writer waits for it.
//
// What is not guaranteed: as for the mutex, a holder paused past its TTL keeps
// running while another is granted.
type RWMutex struct {
	c    *locker
	obs  Observer
	key  string
	try  func(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error)
	wait func(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error)
}

// NewRWMutex returns the read-write lock named key on l's backend. l must come from
// a backend's constructor or Open (wrapped by Instrument or not). It returns an
// error wrapping errors.ErrUnsupported when the backend has no read-write locks,
// and ErrInvalidKey for a bad key. It does not contact the store.
func NewRWMutex(l Locker, key string) (*RWMutex, error) {
	c, obs, err := primitiveCore(l, "read-write locks")
	if err != nil {
		return nil, err
	}
	rw, ok := c.d.(driver.RWLocker)
	if !ok {
		return nil, fmt.Errorf("dlock: the %s backend has no read-write locks: %w", c.info.Name, errors.ErrUnsupported)
	}
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	m := &RWMutex{c: c, obs: obs, key: key, try: rw.TryLockRW}
	if w, ok := c.d.(driver.RWWaiter); ok {
		m.wait = w.LockRW
	}
	return m, nil
}

// Key is the lock's name.
func (m *RWMutex) Key() string { return m.key }

// Acquire blocks until it holds the lock exclusively (no other lease, shared or
// exclusive), ctx is done, or the backend fails. Errors are those of
// Locker.Acquire, plus ErrConflict when the key is held as a semaphore.
func (m *RWMutex) Acquire(ctx context.Context, opts ...Option) (Lease, error) {
	return m.c.acquire(ctx, m.request(false), true, withObserver(m.obs, opts))
}

// TryAcquire makes one attempt at an exclusive lease: ErrNotAcquired when any
// lease is held (or, on a queueing backend, when others wait).
func (m *RWMutex) TryAcquire(ctx context.Context, opts ...Option) (Lease, error) {
	return m.c.acquire(ctx, m.request(false), false, withObserver(m.obs, opts))
}

// AcquireShared blocks until it holds a shared lease (together with any other
// shared leases, never with an exclusive one), ctx is done, or the backend fails.
// Errors are as for Acquire.
func (m *RWMutex) AcquireShared(ctx context.Context, opts ...Option) (Lease, error) {
	return m.c.acquire(ctx, m.request(true), true, withObserver(m.obs, opts))
}

// TryAcquireShared makes one attempt at a shared lease: ErrNotAcquired when an
// exclusive lease is held (or, on a backend with writer preference, when an
// exclusive acquirer waits).
func (m *RWMutex) TryAcquireShared(ctx context.Context, opts ...Option) (Lease, error) {
	return m.c.acquire(ctx, m.request(true), false, withObserver(m.obs, opts))
}

func (m *RWMutex) request(shared bool) request {
	r := request{key: m.key, wake: driver.RWWake(m.key),
		try: func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return m.try(ctx, m.key, shared, ttl)
		}}
	if m.wait != nil {
		r.wait = func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return m.wait(ctx, m.key, shared, ttl)
		}
	}
	return r
}
