// Package zklock is the ZooKeeper backend: the lock recipe of ephemeral sequential
// nodes, with waiters queued by the ensemble.
//
// Each key has a lock directory under a root (default /dlock): root + "/" +
// EscapeKey(key), a container node that ZooKeeper removes once it is empty. To take
// the lock a client creates an ephemeral sequential node "_c_<guid>-lock-NNNNNNNNNN"
// in it; the node with the lowest sequence number holds the lock, and every other
// waiter watches only the node just before its own (no herd effect: a release
// wakes one waiter). The node belongs to the client's session, so a client that
// crashes loses its locks when the ensemble expires its session. These are the
// names and the rule of go-zookeeper's zk.Lock and Apache Curator's
// InterProcessMutex, so all three exclude each other on the same directory.
//
// Leases last as long as the session (driver.Info.SessionTTL): TTL options are
// ignored and Refresh returns errors.ErrUnsupported. Done closes with dlock.ErrLost
// when the session expires, when the lock node is deleted behind the holder's back,
// when the connection is closed, and — because a client cut off from the ensemble
// cannot learn that its session expired — when the client has been disconnected for
// as long as the ensemble could have taken to expire the session (see Locker docs in
// docs/backends/zookeeper.md). The fencing token is the lock node's creation zxid,
// which grows with every grant on a key, also when its directory is recreated.
package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

const (
	// DefaultRoot is the node under which lock directories live unless WithRoot
	// (or the URL's path) says otherwise.
	DefaultRoot = "/dlock"

	protectedPrefix = "_c_"   // go-zookeeper's and Curator's prefix for nodes found again by GUID
	lockInfix       = "lock-" // zk.Lock and Curator: "...lock-" + 10-digit sequence
)

// Option configures New.
type Option func(*config)

type config struct {
	root       string
	acl        []zk.ACL
	timeout    time.Duration // session timeout the connection negotiated; 0 = unknown
	closeConn  bool          // the Locker owns the connection (Open)
	negotiated func() time.Duration
}

// WithRoot puts lock directories under root instead of DefaultRoot. root must be
// an absolute ZooKeeper path other than "/" and outside /zookeeper; New panics
// otherwise (a programming error). The root is created when missing.
func WithRoot(root string) Option { return func(c *config) { c.root = root } }

// WithACL sets the ACL of the nodes the Locker creates (default zk.WorldACL(zk.PermAll)).
func WithACL(acl []zk.ACL) Option { return func(c *config) { c.acl = acl } }

// WithSessionTimeout tells the Locker the session timeout its connection negotiated
// with the ensemble. A holder cut off from the ensemble ends its leases with ErrLost
// once it has been disconnected for a third of it, minus a drift allowance (the
// earliest moment the ensemble may have expired the session, given that
// go-zookeeper notices a silent link after two thirds of it). Without this option
// the timeout is unknown and a lease ends at the first disconnection seen. Give
// the negotiated value: a server clamps the requested timeout to its
// [minSessionTimeout, maxSessionTimeout]; a value larger than the real one lets a
// lease outlive its session. Open learns the negotiated value by itself.
func WithSessionTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// New returns a Locker that takes locks through conn, which must stay open while the
// Locker is used; Close does not close it. See the package documentation for the
// algorithm. New panics on an invalid WithRoot.
func New(conn *zk.Conn, opts ...Option) dlock.Locker {
	c := config{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		o(&c)
	}
	if err := validateRoot(c.root); err != nil {
		panic("zklock: " + err.Error())
	}
	return newLocker(conn, c)
}

func newLocker(conn *zk.Conn, c config) dlock.Locker {
	d := &zkDriver{conn: conn, cfg: c, held: map[*zkLock]struct{}{}, done: make(chan struct{})}
	return dlock.New(d, driver.Info{Name: "zookeeper", SessionTTL: true})
}

// validateRoot checks root as ZooKeeper's PathUtils would, plus what dlock needs.
func validateRoot(root string) error {
	if root == "" || root[0] != '/' || root == "/" || strings.HasSuffix(root, "/") {
		return fmt.Errorf("root %q must be an absolute path other than \"/\", without a trailing slash", root)
	}
	for i, seg := range strings.Split(root[1:], "/") {
		switch {
		case seg == "", seg == ".", seg == "..":
			return fmt.Errorf("root %q has an empty, \".\" or \"..\" segment", root)
		case i == 0 && seg == "zookeeper":
			return fmt.Errorf("root %q is inside ZooKeeper's own /zookeeper", root)
		}
		for _, r := range seg {
			if r < 0x20 || 0x7f <= r && r <= 0x9f || 0xd800 <= r && r <= 0xf8ff || r >= 0xfff0 {
				return fmt.Errorf("root %q contains the character %U, which ZooKeeper rejects", root, r)
			}
		}
	}
	return nil
}

// LockDir returns the path of key's lock directory under root: the directory to give
// go-zookeeper's zk.NewLock or Curator's InterProcessMutex so that they and dlock
// exclude each other on key.
func LockDir(root, key string) string { return root + "/" + EscapeKey(key) }

// zkDriver is one Locker's client of the ensemble.
type zkDriver struct {
	conn *zk.Conn
	cfg  config

	mu         sync.Mutex
	held       map[*zkLock]struct{}
	monitoring bool
	closed     bool
	done       chan struct{} // closed by Close
}

func (d *zkDriver) TryLock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.acquire(ctx, key, false)
}

// Lock queues for key and waits until every node before ours is gone.
func (d *zkDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.acquire(ctx, key, true)
}

func (d *zkDriver) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
	d.mu.Unlock()
	if d.cfg.closeConn {
		d.conn.Close()
	}
	return nil
}

func (d *zkDriver) acquire(ctx context.Context, key string, wait bool) (driver.Lock, error) {
	dir := LockDir(d.cfg.root, key)
	path, err := call(ctx, func() (string, error) { return d.create(dir) },
		func(path string, err error) { // ctx ended first: undo a create that went through
			if err == nil {
				d.discard(path)
			}
		})
	if err != nil {
		return nil, err
	}
	lk, err := d.queue(ctx, dir, path, wait)
	if err != nil {
		// Leave nothing behind: delete our node now, or in the background until the
		// ensemble answers (or the session is gone).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_, derr := call(dctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) }, nil)
		cancel()
		if derr != nil && !errors.Is(derr, zk.ErrNoNode) {
			go d.discard(path)
		}
		return nil, err
	}
	return lk, nil
}

// create makes our ephemeral sequential node in dir and returns its path. A create
// whose answer was lost with the connection is looked up by its GUID rather than
// made twice.
func (d *zkDriver) create(dir string) (string, error) {
	var g [16]byte
	_, _ = rand.Read(g[:])
	guid := hex.EncodeToString(g[:])
	prefix := dir + "/" + protectedPrefix + guid + "-" + lockInfix
	var err error
	for range 8 {
		var path string
		path, err = d.conn.Create(prefix, nil, zk.FlagEphemeral|zk.FlagSequence, d.cfg.acl)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, zk.ErrNoNode): // no directory yet (or the container was just reaped)
			if err = d.makeDir(dir); err != nil {
				return "", err
			}
		case errors.Is(err, zk.ErrConnectionClosed): // did it go through? find it by its GUID
			var found string
			err = d.settle(func() error {
				children, _, err := d.conn.Children(dir)
				for _, c := range children {
					if strings.HasPrefix(c, protectedPrefix+guid) {
						found = dir + "/" + c
					}
				}
				return err
			})
			if found != "" {
				return found, nil
			}
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				return "", err
			}
		case errors.Is(err, zk.ErrSessionExpired): // no node can have survived: try in the new session
		default:
			return "", err
		}
	}
	return "", fmt.Errorf("create in %s: %w", dir, err)
}

// makeDir creates dir as a container node (ZooKeeper deletes it once its last child
// is gone), and the root if it is missing.
func (d *zkDriver) makeDir(dir string) error {
	_, err := d.conn.CreateContainer(dir, nil, zk.FlagContainer, d.cfg.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if err = makePath(d.conn, d.cfg.root, d.cfg.acl); err != nil {
			return err
		}
		_, err = d.conn.CreateContainer(dir, nil, zk.FlagContainer, d.cfg.acl)
	}
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create lock directory %s: %w", dir, err)
	}
	return nil
}

// makePath creates path and its missing parents as persistent nodes.
func makePath(conn *zk.Conn, path string, acl []zk.ACL) error {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		_, err := conn.Create(path[:i], nil, zk.FlagPersistent, acl)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", path[:i], err)
		}
	}
	return nil
}

// queue waits (or, without wait, only checks) until our node at path is the lowest
// in dir, and returns the held lock.
func (d *zkDriver) queue(ctx context.Context, dir, path string, wait bool) (*zkLock, error) {
	name := path[len(dir)+1:]
	seq, ok := parseSeq(name)
	if !ok {
		return nil, fmt.Errorf("unexpected lock node name %q", name)
	}
	// Our own node: its stat (the token, the session) and a watch that reports its
	// end, asked for while the directory is listed.
	type own struct {
		st *zk.Stat
		ev <-chan zk.Event
	}
	ownCh := make(chan own, 1)
	ownErr := make(chan error, 1)
	go func() {
		_, st, ev, err := d.conn.GetW(path)
		if err != nil {
			ownErr <- fmt.Errorf("watch own node %s: %w", path, err)
			return
		}
		ownCh <- own{st, ev}
	}()
	var me own
	haveOwn := false
	for {
		children, err := call(ctx, func() ([]string, error) {
			c, _, err := d.conn.Children(dir)
			return c, err
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		if !haveOwn {
			select {
			case me = <-ownCh:
				haveOwn = true
			case err := <-ownErr:
				return nil, err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		pred, mine := predecessor(children, name, seq)
		if !mine {
			return nil, fmt.Errorf("our lock node %s is gone (session expired?)", path)
		}
		if pred == "" {
			return d.hold(path, me.st, me.ev), nil
		}
		if !wait {
			return nil, driver.Busy(0)
		}
		type watch struct {
			ok bool
			ev <-chan zk.Event
		}
		w, err := call(ctx, func() (watch, error) {
			_, _, ev, err := d.conn.GetW(dir + "/" + pred)
			if errors.Is(err, zk.ErrNoNode) {
				return watch{}, nil
			}
			return watch{ev != nil, ev}, err
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", pred, err)
		}
		if !w.ok {
			continue // gone already: look again
		}
		select {
		case e := <-w.ev:
			if e.Type == zk.EventNotWatching {
				return nil, fmt.Errorf("waiting for %s: %w", pred, e.Err)
			}
		case e := <-me.ev:
			if gone, err := ownNodeEnded(e); gone {
				return nil, fmt.Errorf("our lock node %s ended while waiting: %w", path, err)
			}
			// Someone wrote data to our node: watch it again.
			_, st, ev, err := d.conn.GetW(path)
			if err != nil {
				return nil, fmt.Errorf("watch own node %s: %w", path, err)
			}
			me = own{st, ev}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// parseSeq returns the sequence number of a lock node: the digits after the last
// "lock-", as zk.Lock and Curator read them.
func parseSeq(name string) (int64, bool) {
	i := strings.LastIndex(name, lockInfix)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(lockInfix):], 10, 64)
	return n, err == nil
}

// predecessor returns the child just before ours ("" if ours is the lowest), and
// whether ours is among children at all. Children that are not lock nodes are
// ignored.
func predecessor(children []string, name string, seq int64) (pred string, mine bool) {
	best := int64(-1 << 63)
	for _, c := range children {
		if c == name {
			mine = true
			continue
		}
		s, ok := parseSeq(c)
		if ok && s < seq && s > best {
			best, pred = s, c
		}
	}
	return pred, mine
}

// ownNodeEnded interprets an event on our own node: gone is true when the node
// (or the session that owns it, or the connection) has ended.
func ownNodeEnded(e zk.Event) (gone bool, err error) {
	switch e.Type {
	case zk.EventNodeDeleted:
		return true, errNodeDeleted
	case zk.EventNotWatching:
		return true, e.Err
	}
	return false, nil
}

var errNodeDeleted = errors.New("zklock: lock node deleted")

// call runs f, a blocking request on the connection (go-zookeeper takes no
// context), and waits for it or for ctx. When ctx ends first, f goes on and undo
// (if not nil) gets its result when it returns, to take back what it did.
func call[T any](ctx context.Context, f func() (T, error), undo func(T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if undo != nil {
			go func() {
				r := <-ch
				undo(r.v, r.err)
			}()
		}
		return zero, ctx.Err()
	}
}

// transient reports an error after which the same request may succeed once the
// client is connected again.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

// settle runs op until it gives an answer that is not transient or the Locker is
// closed. It sets no time limit of its own: a client cut off from the ensemble
// cannot tell when its session ends (a new leader gives every session a fresh
// timeout), and a node of a session that did end is answered with ErrNoNode once
// the client reaches the ensemble again.
func (d *zkDriver) settle(op func() error) error {
	pause := 10 * time.Millisecond
	for {
		err := op()
		if !transient(err) {
			return err
		}
		select {
		case <-d.done:
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// discard deletes a node of ours that must not stay (an abandoned wait, a lease
// that ended while its session may live on), retrying while the client is
// disconnected.
func (d *zkDriver) discard(path string) {
	_ = d.settle(func() error { return d.conn.Delete(path, -1) })
}

func (d *zkDriver) sessionTimeout() time.Duration {
	if d.cfg.negotiated != nil {
		if t := d.cfg.negotiated(); t > 0 {
			return t
		}
	}
	return d.cfg.timeout
}
