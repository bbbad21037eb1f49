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
	lk, err := d.acquireIn(ctx, LockDir(d.cfg.root, key), lockInfix, nil, wait)
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// acquireIn queues in dir (a lock's directory, or an election's) with a node named
// with infix ("lock-", "latch-") that holds data, and waits (or, without wait, only
// checks) until it is the lowest.
func (d *zkDriver) acquireIn(ctx context.Context, dir, infix string, data []byte, wait bool) (*zkLock, error) {
	path, err := call(ctx, func() (string, error) { return d.create(dir, infix, data) },
		func(path string, err error) { // ctx ended first: undo a create that went through
			if err == nil {
				d.discard(path)
			}
		})
	if err != nil {
		return nil, err
	}
	lk, err := d.queue(ctx, dir, path, infix, wait)
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

// create makes our ephemeral sequential node (named with infix, holding data) in dir
// and returns its path. A create whose answer was lost with the connection is
// looked up by its GUID rather than made twice.
func (d *zkDriver) create(dir, infix string, data []byte) (string, error) {
	var g [16]byte
	_, _ = rand.Read(g[:])
	guid := hex.EncodeToString(g[:])
	prefix := dir + "/" + protectedPrefix + guid + "-" + infix
	var err error
	for range 8 {
		var path string
		path, err = d.conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, d.cfg.acl)
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
// is gone), and its missing parents: containers up to the root, which it creates as
// a persistent node if it is missing.
func (d *zkDriver) makeDir(dir string) error {
	_, err := d.conn.CreateContainer(dir, nil, zk.FlagContainer, d.cfg.acl)
	if errors.Is(err, zk.ErrNoNode) {
		if parent := dir[:strings.LastIndexByte(dir, '/')]; parent == d.cfg.root {
			err = makePath(d.conn, d.cfg.root, d.cfg.acl)
		} else {
			err = d.makeDir(parent)
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

// queue waits (or, without wait, only checks) until our node at path is the lowest
// in dir, and returns the held lock.
func (d *zkDriver) queue(ctx context.Context, dir, path, infix string, wait bool) (*zkLock, error) {
	name := path[len(dir)+1:]
	seq, ok := parseSeq(name, infix)
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
		pred, mine := predecessor(children, name, seq, infix)
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

// parseSeq returns the sequence number of a node named with infix: the digits after
// the last infix ("lock-", "latch-"), as zk.Lock and Curator read them.
func parseSeq(name, infix string) (int64, bool) {
	i := strings.LastIndex(name, infix)
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[i+len(infix):], 10, 64)
	return n, err == nil
}

// predecessor returns the child just before ours ("" if ours is the lowest), and
// whether ours is among children at all. Children that are not lock nodes are
// ignored.
func predecessor(children []string, name string, seq int64, infix string) (pred string, mine bool) {
	best := int64(-1 << 63)
	for _, c := range children {
		if c == name {
			mine = true
			continue
		}
		s, ok := parseSeq(c, infix)
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
