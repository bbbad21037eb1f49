// Package etcdpeer presents etcd's own lock, go.etcd.io/etcd/client/v3/concurrency
// (v3.7.3) Mutex, as a dlock.Locker, so that the conformance suite, the fault
// scenarios and the benchmarks run on it beside dlock's own backends.
//
// The library is driven as a dlock driver (package driver) and runs under dlock.New
// like every backend, so its leases are dlock's own (Done/Err, Observer events).
// A Locker is one concurrency.Session (a lease kept alive in the background), as the
// package intends: "a lease kept alive for the lifetime of a client". Each Acquire
// makes a concurrency.NewMutex(session, prefix+key) and calls its Lock (one
// transaction when the lock is free, else a watch on the waiter just before it);
// TryAcquire calls TryLock; Release calls Unlock.
//
// What follows from the library, and is measured by the tests:
//   - The lock is held by the session, not by the caller: two Acquires of one key
//     through one Locker are both granted at once (Mutex reuses the session's key).
//     Use one Locker per worker that must exclude the others.
//   - The key is an etcd key prefix, used as given: a lock named "a" counts the
//     waiters of "a/b" as its own (they share the prefix "a/"), so such keys block
//     each other.
//   - Unlock deletes this session's key and says nothing when it was already gone:
//     Release of a lock that was deleted behind its holder returns nil.
//   - Leases last as long as the session: WithTTL is ignored (the session's TTL,
//     WithSessionTTL, plays its part), Refresh returns errors.ErrUnsupported, and Done
//     closes with ErrLost when the session ends (keep-alive failed, lease revoked).
//
// Token is the revision of the response that granted the lock (Mutex.Header()): the
// lock key's create revision when it was granted at once, a later revision after a
// wait; either way it increases with every grant of one key.
package etcdpeer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Name is the peer's name in errors.
const Name = "etcd-mutex"

// Option configures New.
type Option func(*config)

type config struct {
	prefix string
	ttl    int
}

// WithPrefix puts every lock under prefix (default ""): the Mutex prefix of key is
// prefix+key.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// DefaultSessionTTL is the session TTL in seconds without WithSessionTTL:
// concurrency.NewSession's own default.
const DefaultSessionTTL = 60

// WithSessionTTL sets the session's lease TTL in seconds (default 60, the library's):
// how long a vanished client's locks outlive it. etcd raises TTLs below its minimum
// (about 2s with default server timing).
func WithSessionTTL(seconds int) Option { return func(c *config) { c.ttl = seconds } }

// New starts a session on cli and returns a Locker whose locks the session holds.
// It returns the error of the session's lease grant, which ctx bounds. Close ends the session (its
// locks are freed at once) but does not close cli.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (dlock.Locker, error) {
	c := config{ttl: DefaultSessionTTL}
	for _, o := range opts {
		o(&c)
	}
	// The session's lease is granted within ctx (NewSession would grant it under the
	// session's own context, which must outlive ctx: against a server that does not
	// answer it would wait for ever), then kept alive by the session.
	lease, err := cli.Grant(ctx, int64(c.ttl))
	if err != nil {
		return nil, fmt.Errorf("etcdpeer: session: %w", err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(c.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("etcdpeer: session: %w", err)
	}
	return &locker{Locker: dlock.New(&mutexDriver{s: s, prefix: c.prefix}, driver.Info{Name: Name, SessionTTL: true}), s: s}, nil
}

// locker is the Locker New returns: it also gives its session to tests (Session).
type locker struct {
	dlock.Locker
	s *concurrency.Session
}

// Unwrap returns the dlock.Locker underneath (dlock.Unwrapper).
func (l *locker) Unwrap() dlock.Locker { return l.Locker }

// Session is the Locker's concurrency.Session.
func (l *locker) Session() *concurrency.Session { return l.s }

type mutexDriver struct {
	s      *concurrency.Session
	prefix string
}

var _ driver.Waiter = (*mutexDriver)(nil)

func (d *mutexDriver) TryLock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.lock(ctx, key, false)
}

func (d *mutexDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.lock(ctx, key, true)
}

func (d *mutexDriver) lock(ctx context.Context, key string, wait bool) (driver.Lock, error) {
	m := concurrency.NewMutex(d.s, d.prefix+key)
	var err error
	if wait {
		err = m.Lock(ctx)
	} else {
		err = m.TryLock(ctx)
	}
	switch {
	case errors.Is(err, concurrency.ErrLocked):
		return nil, driver.Busy(0)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
	case err != nil:
		return nil, err
	}
	return &mutexLock{m: m, s: d.s}, nil
}

// Close closes the session (revoking its lease, which frees its locks).
func (d *mutexDriver) Close() error {
	err := d.s.Close()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// mutexLock is one concurrency.Mutex held; it lasts as long as the session.
type mutexLock struct {
	m *concurrency.Mutex
	s *concurrency.Session
}

// Token is the revision of the response that granted the lock.
func (k *mutexLock) Token() uint64 { return uint64(k.m.Header().Revision) }

func (k *mutexLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (k *mutexLock) Unlock(ctx context.Context) error {
	err := k.m.Unlock(ctx)
	if errors.Is(err, concurrency.ErrLockReleased) {
		return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
	}
	return err
}

// Lost is closed when the session ends (keep-alive failed, lease revoked).
func (k *mutexLock) Lost() <-chan struct{} { return k.s.Done() }

// Cause says why Lost closed.
func (k *mutexLock) Cause() error { return concurrency.ErrSessionExpired }
