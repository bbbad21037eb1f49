// Package etcdpeer presents etcd's own lock, go.etcd.io/etcd/client/v3/concurrency
// (v3.7.3) Mutex, as a dlock.Locker, so that the conformance suite, the fault
// scenarios and the benchmarks run on it beside dlock's own backends.
//
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
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerlease"
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

// WithSessionTTL sets the session's lease TTL in seconds (default 60, the library's):
// how long a vanished client's locks outlive it. etcd raises TTLs below its minimum
// (about 2s with default server timing).
func WithSessionTTL(seconds int) Option { return func(c *config) { c.ttl = seconds } }

// New starts a session on cli and returns a Locker whose locks the session holds.
// It returns the error of the session's lease grant. Close ends the session (its
// locks are freed at once) but does not close cli.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (dlock.Locker, error) {
	c := config{ttl: 60}
	for _, o := range opts {
		o(&c)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(c.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("dlock: %s: session: %w", Name, err)
	}
	l := &locker{s: s, prefix: c.prefix, set: peerlease.NewSet(Name), stop: make(chan struct{})}
	l.wg.Go(l.watchSession)
	return l, nil
}

type locker struct {
	s      *concurrency.Session
	prefix string
	set    *peerlease.Set
	stop   chan struct{}
	wg     sync.WaitGroup
}

// Session returns the Locker's session, e.g. for a test that makes the client vanish
// (Orphan stops the keep-alive without revoking the lease, as a crash does).
func (l *locker) Session() *concurrency.Session { return l.s }

func (l *locker) watchSession() {
	select {
	case <-l.s.Done():
		l.set.Lose(concurrency.ErrSessionExpired)
	case <-l.stop:
	}
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.lock(ctx, key, opts, true)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.lock(ctx, key, opts, false)
}

func (l *locker) lock(ctx context.Context, key string, opts []dlock.Option, wait bool) (dlock.Lease, error) {
	o, err := l.set.Begin(key, opts)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(l.s, l.prefix+key)
	if wait {
		err = m.Lock(ctx)
	} else {
		err = m.TryLock(ctx)
	}
	switch {
	case errors.Is(err, concurrency.ErrLocked):
		return nil, l.set.NotAcquired(ctx, key, nil)
	case err != nil && ctx.Err() != nil:
		return nil, l.set.NotAcquired(ctx, key, err)
	case err != nil:
		return nil, l.set.Failed(key, err)
	}
	return l.set.Grant(key, uint64(m.Header().Revision), time.Time{}, o, peerlease.Hooks{
		Release: func(ctx context.Context) error {
			err := m.Unlock(ctx)
			if errors.Is(err, concurrency.ErrLockReleased) {
				return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
			}
			return err
		},
	})
}

// Close releases the leases still held, ends them with dlock.ErrClosed and closes the
// session (revoking its lease). Later calls return dlock.ErrClosed. Idempotent; a
// session whose lease had already expired closes without error.
func (l *locker) Close() error {
	if !l.set.Close() {
		return nil
	}
	close(l.stop)
	l.wg.Wait()
	err := l.s.Close()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dlock: %s: close session: %w", Name, err)
	}
	return nil
}
