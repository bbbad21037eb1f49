// Package zkpeer presents github.com/go-zookeeper/zk (v1.0.4) Lock as a dlock.Locker,
// so that the conformance suite, the fault scenarios and the benchmarks run on it
// beside dlock's own backends.
//
// The library is driven as a dlock driver (package driver) and runs under dlock.New
// like every backend, so its leases are dlock's own (Done/Err, Observer events).
// A Locker is one ZooKeeper session (New). Each Acquire makes
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
	"github.com/dlock-go/dlock/driver"
)

// Name is the peer's name in errors.
const Name = "zk.Lock"

// DefaultRoot is the path the lock paths are under when New has no WithRoot.
const DefaultRoot = "/locks"

// DefaultSessionTimeout is the session timeout a peer+zk:// URL asks for by default.
const DefaultSessionTimeout = 10 * time.Second

// Option configures New.
type Option func(*config)

type config struct {
	root string
	acl  []zk.ACL
}

// WithRoot puts the locks under root instead of DefaultRoot (no trailing slash).
func WithRoot(root string) Option { return func(c *config) { c.root = root } }

// WithACL sets the ACL of the nodes the locks create (default zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) Option { return func(c *config) { c.acl = acl } }

// New opens a ZooKeeper session to servers (host:port) with the given session
// timeout (the server may bound it) and returns a Locker whose locks the session
// holds. Close closes the session, which frees its locks.
func New(servers []string, sessionTimeout time.Duration, opts ...Option) (dlock.Locker, error) {
	c := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		o(&c)
	}
	d := &zkDriver{root: c.root, acl: c.acl, session: newSession()}
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(quiet{}), zk.WithEventCallback(d.event))
	if err != nil {
		return nil, fmt.Errorf("zkpeer: connect: %w", err)
	}
	d.conn = conn
	return dlock.New(d, driver.Info{Name: Name, SessionTTL: true}), nil
}

// quiet drops go-zookeeper's log lines (every reconnect attempt is logged).
type quiet struct{}

func (quiet) Printf(string, ...any) {}

type zkDriver struct {
	conn *zk.Conn
	root string
	acl  []zk.ACL

	mu      sync.Mutex
	session *session // the current session: its locks are lost together
	closing bool
	wg      sync.WaitGroup // Lock calls still running
}

var _ driver.Waiter = (*zkDriver)(nil)

// session is one ZooKeeper session as the library reports it: lost is closed when
// the library reports it expired.
type session struct{ lost chan struct{} }

func newSession() *session { return &session{lost: make(chan struct{})} }

// spawn runs f in a goroutine that Close waits for, unless Close has begun.
func (d *zkDriver) spawn(f func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return false
	}
	d.wg.Go(f)
	return true
}

// event ends the locks of a session the library reports expired; the library then
// makes a new session.
func (d *zkDriver) event(ev zk.Event) {
	if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
		d.mu.Lock()
		close(d.session.lost)
		d.session = newSession()
		d.mu.Unlock()
	}
}

func (d *zkDriver) current() *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.session
}

// TryLock lists the lock's children: busy if any node is queued, else it calls Lock
// (which may still wait, bounded by ctx, if another client queued in between).
func (d *zkDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	queued, _, err := d.conn.Children(d.root + "/" + key)
	switch {
	case err == nil && len(queued) > 0:
		return nil, driver.Busy(0)
	case err != nil && !errors.Is(err, zk.ErrNoNode):
		return nil, err
	}
	return d.Lock(ctx, key, ttl)
}

// Lock calls zk.Lock.Lock in the background: it takes no context. When ctx ends
// first, the call goes on and releases the lock once it gets it.
func (d *zkDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	s := d.current()
	zl := zk.NewLock(d.conn, d.root+"/"+key, d.acl)
	result := make(chan error, 1)
	if !d.spawn(func() { result <- zl.Lock() }) {
		return nil, dlock.ErrClosed
	}
	select {
	case err := <-result:
		if err != nil {
			return nil, err
		}
		return &zkLock{zl: zl, s: s}, nil
	case <-ctx.Done():
		d.spawn(func() {
			if <-result == nil {
				_ = zl.Unlock()
			}
		})
		return nil, ctx.Err()
	}
}

// Close closes the connection (ending the session) and waits for the Lock calls
// still running, which the closed connection ends.
func (d *zkDriver) Close() error {
	d.mu.Lock()
	d.closing = true
	d.mu.Unlock()
	d.conn.Close()
	d.wg.Wait()
	return nil
}

// zkLock is one zk.Lock held; it lasts as long as the session.
type zkLock struct {
	zl *zk.Lock
	s  *session
}

func (k *zkLock) Token() uint64 { return 0 }

func (k *zkLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (k *zkLock) Unlock(context.Context) error {
	err := k.zl.Unlock()
	if errors.Is(err, zk.ErrNotLocked) || errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %w", dlock.ErrNotHeld, err)
	}
	return err
}

// Lost is closed when the library reports the session expired.
func (k *zkLock) Lost() <-chan struct{} { return k.s.lost }

// Cause says why Lost closed.
func (k *zkLock) Cause() error { return zk.ErrSessionExpired }
