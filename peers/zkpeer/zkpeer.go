// Package zkpeer presents github.com/go-zookeeper/zk (v1.0.4) Lock as a dlock.Locker,
// so that the conformance suite, the fault scenarios and the benchmarks run on it
// beside dlock's own backends.
//
// A Locker is one ZooKeeper session (Connect). Each Acquire makes
// zk.NewLock(conn, root+"/"+key, acl) and calls its Lock: an ephemeral sequential node
// under the lock's path, then a watch on the node just before it until it is the
// lowest. Release calls Unlock (deletes the node). The locks last as long as the
// session: WithTTL is ignored, Refresh returns errors.ErrUnsupported, and Done closes
// with ErrLost when the library reports the session expired (StateExpired). A client
// cut off from the ensemble hears of the expiry only when it reconnects: until then
// Done stays open although the server may have freed its locks.
//
// What the library does not have, and how the adapter fills the gap:
//   - zk.Lock takes no context and cannot be abandoned. When ctx ends, Acquire returns
//     at once; the Lock call goes on in the background and, once it gets the lock,
//     releases it. Until then its node stays queued and the lock is not free for
//     others: a cancelled wait leaves something behind for a while.
//   - zk.Lock has no try. TryAcquire lists the lock's children: if any node is
//     queued it returns ErrNotAcquired, else it calls Lock, which may still wait (as
//     Acquire does, bounded by ctx) if another client queued in between.
//   - The lock's path is the key as given, under the root: a key with '/' makes
//     nested nodes, a key that is not a valid ZooKeeper path ("a//b", "a/", ".",
//     NUL, ...) fails with the library's error, and a key whose path holds another
//     key's nodes ("a" after "a/b") fails to parse its children.
//
// Token is 0: the node's sequence number would fence, but zk.Lock does not expose it.
package zkpeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerlease"
)

// Name is the peer's name in errors.
const Name = "zk.Lock"

// DefaultRoot is the path the lock paths are under when Connect has no WithRoot.
const DefaultRoot = "/locks"

// Option configures Connect.
type Option func(*config)

type config struct {
	root string
	acl  []zk.ACL
}

// WithRoot puts the locks under root instead of DefaultRoot (no trailing slash).
func WithRoot(root string) Option { return func(c *config) { c.root = root } }

// WithACL sets the ACL of the nodes the locks create (default zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) Option { return func(c *config) { c.acl = acl } }

// Connect opens a ZooKeeper session to servers (host:port) with the given session
// timeout (the server may bound it) and returns a Locker whose locks the session
// holds. Close closes the session, which frees its locks.
func Connect(servers []string, sessionTimeout time.Duration, opts ...Option) (dlock.Locker, error) {
	c := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		o(&c)
	}
	l := &locker{root: c.root, acl: c.acl, set: peerlease.NewSet(Name)}
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(quiet{}), zk.WithEventCallback(l.event))
	if err != nil {
		return nil, fmt.Errorf("dlock: %s: connect: %w", Name, err)
	}
	l.conn = conn
	return l, nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

type locker struct {
	conn *zk.Conn
	root string
	acl  []zk.ACL
	set  *peerlease.Set

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup // Lock calls still running
}

// spawn runs f in a goroutine that Close waits for; false once Close has begun.
func (l *locker) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.wg.Go(f)
	return true
}

func (l *locker) event(ev zk.Event) {
	if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
		l.set.Lose(zk.ErrSessionExpired)
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
	path := l.root + "/" + key
	if !wait {
		queued, _, err := l.conn.Children(path)
		switch {
		case err == nil && len(queued) > 0:
			return nil, l.set.NotAcquired(ctx, key, nil)
		case err != nil && !errors.Is(err, zk.ErrNoNode):
			return nil, l.set.Failed(key, err)
		}
	}
	zl := zk.NewLock(l.conn, path, l.acl)
	result := make(chan error, 1)
	if !l.spawn(func() { result <- zl.Lock() }) {
		return nil, dlock.ErrClosed
	}
	select {
	case err = <-result:
	case <-ctx.Done():
		// Once Close has begun nobody waits: closing the session frees the lock.
		l.spawn(func() {
			if <-result == nil {
				_ = zl.Unlock()
			}
		})
		return nil, l.set.NotAcquired(ctx, key, nil)
	}
	if err != nil {
		if l.set.Closed() {
			return nil, dlock.ErrClosed
		}
		return nil, l.set.Failed(key, err)
	}
	return l.set.Grant(key, 0, time.Time{}, o, peerlease.Hooks{
		Release: func(context.Context) error {
			err := zl.Unlock()
			if errors.Is(err, zk.ErrNotLocked) || errors.Is(err, zk.ErrNoNode) {
				return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
			}
			return err
		},
	})
}

// Close releases the leases still held, ends them with dlock.ErrClosed, closes the
// session and waits for abandoned Lock calls to return. Idempotent.
func (l *locker) Close() error {
	if !l.set.Close() {
		return nil
	}
	l.mu.Lock()
	l.closing = true
	l.mu.Unlock()
	l.conn.Close()
	l.wg.Wait()
	return nil
}
