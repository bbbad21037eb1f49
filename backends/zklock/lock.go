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

	"github.com/dlock-go/dlock/driver"
)

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
	return asLock(d.acquire(ctx, LockDir(d.cfg.root, key), lockInfix, false, mutexRule, nil))
}

// Lock queues for key and waits until every node before ours is gone.
func (d *zkDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return asLock(d.acquire(ctx, LockDir(d.cfg.root, key), lockInfix, true, mutexRule, nil))
}

// asLock returns lk as a driver.Lock, or no Lock at all with an error.
func asLock(lk *zkLock, err error) (driver.Lock, error) {
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// rule decides from the children of a queue's directory whether our node (name)
// holds the lock: watch is "" when it does, else the node whose end may change
// that; mine is false when our node is not among children.
type rule func(children []string, name string) (watch string, mine bool, err error)

// mutexRule: the lowest lock node holds; a waiter watches the node just before its
// own.
func mutexRule(children []string, name string) (string, bool, error) {
	seq, ok := parseSeq(name)
	if !ok {
		return "", false, fmt.Errorf("unexpected lock node name %q", name)
	}
	pred, mine := predecessor(children, name, seq)
	return pred, mine, nil
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

// acquire queues a node named with infix in dir and takes the lock as r decides
// (waiting for it with wait). check, if not nil, runs once beside the first look at
// the queue; its error aborts the acquire (a conflict).
func (d *zkDriver) acquire(ctx context.Context, dir, infix string, wait bool, r rule, check func() error) (*zkLock, error) {
	path, err := call(ctx, func() (string, error) { return d.create(dir, infix) },
		func(path string, err error) { // ctx ended first: undo a create that went through
			if err == nil {
				d.discard(path)
			}
		})
	if err != nil {
		return nil, err
	}
	lk, err := d.queue(ctx, dir, path, wait, r, check)
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

// create makes our ephemeral sequential node in dir, named with infix, and returns
// its path. A create whose answer was lost with the connection is looked up by its
// GUID rather than made twice.
func (d *zkDriver) create(dir, infix string) (string, error) {
	var g [16]byte
	_, _ = rand.Read(g[:])
	guid := hex.EncodeToString(g[:])
	prefix := dir + "/" + protectedPrefix + guid + "-" + infix
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
// is gone), its parents below the root as containers too, and the root if it is
// missing.
func (d *zkDriver) makeDir(dir string) error {
	_, err := d.conn.CreateContainer(dir, nil, zk.FlagContainer, d.cfg.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if parent := dir[:strings.LastIndexByte(dir, '/')]; len(parent) > len(d.cfg.root) {
			err = d.makeDir(parent)
		} else {
			err = makePath(d.conn, d.cfg.root, d.cfg.acl)
		}
		if err != nil {
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

// queue waits (or, without wait, only checks) until r says our node at path holds
// the lock, and returns the held lock.
func (d *zkDriver) queue(ctx context.Context, dir, path string, wait bool, r rule, check func() error) (*zkLock, error) {
	name := path[len(dir)+1:]
	checked := make(chan error, 1)
	if check != nil {
		go func() { checked <- check() }()
	} else {
		checked <- nil
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
			select {
			case err := <-checked:
				if err != nil {
					return nil, err
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		pred, mine, err := r(children, name)
		if err != nil {
			return nil, err
		}
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
			if pred == watchDir { // any change of the directory's children
				children, _, ev, err := d.conn.ChildrenW(dir)
				if err != nil {
					return watch{}, err
				}
				if p, _, err := r(children, name); err != nil || p != watchDir {
					return watch{}, err // changed already: look again
				}
				return watch{true, ev}, nil
			}
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
