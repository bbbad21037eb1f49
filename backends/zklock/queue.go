package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// The queue engine: our ephemeral sequential node in a lock's directory, the rule
// that decides from the directory's children whether it holds, and the wait on the
// node before ours. The mutex, the semaphores, the read-write locks and the
// elections all run on it, each with its rule.

// rule decides from the children of a queue's directory whether our node (name)
// holds the lock: watch is "" when it does, else the node whose end may change
// that; mine is false when our node is not among children. Children found planted
// are left out of children; owned holds those known to be a session's (ephemeral).
// A rule whose answer depends on nodes not known yet returns a *verifyError naming
// them: queue reads their stats and asks again.
type rule func(children []string, name string, owned map[string]bool) (watch string, mine bool, err error)

// verifyError is a rule's request to learn which of nodes a session owns before it
// answers (a node planted with the world ACL must not count).
type verifyError struct{ nodes []string }

func (e *verifyError) Error() string { return fmt.Sprintf("%d nodes to verify", len(e.nodes)) }

// mutexRule: the lowest lock node holds; a waiter watches the node just before its
// own.
var mutexRule = lowestRule(lockInfix)

// lowestRule: the lowest node named with infix holds (a mutex's "lock-", an
// election's "latch-"); a waiter watches the node just before its own.
func lowestRule(infix string) rule {
	return func(children []string, name string, _ map[string]bool) (string, bool, error) {
		seq, ok := parseSeqOf(name, infix)
		if !ok {
			return "", false, fmt.Errorf("unexpected lock node name %q", name)
		}
		pred, mine := predecessor(children, name, seq, infix)
		return pred, mine, nil
	}
}

// acquire queues a node named with infix, holding data, in dir and takes the lock as
// r decides (waiting for it with wait). check, if not nil, runs once beside the
// first look at the queue; its error aborts the acquire (a conflict).
func (d *zkDriver) acquire(ctx context.Context, dir, infix string, data []byte, wait bool, r rule, check func() error) (*zkLock, error) {
	path, err := call(ctx, func() (string, error) { return d.create(dir, infix, data) },
		func(path string, err error) { // ctx ended first: take back a create that went through
			if err == nil {
				d.remove(ctx, path)
			}
		})
	if err != nil {
		return nil, err
	}
	lk, err := d.queue(ctx, dir, path, wait, r, check)
	if err != nil {
		d.remove(ctx, path) // leave nothing behind
		return nil, err
	}
	return lk, nil
}

// remove deletes our node at path now, waiting up to undoWait, or else in the
// background until the ensemble answers (or the session is gone).
func (d *zkDriver) remove(ctx context.Context, path string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoWait)
	_, err := call(dctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(path, -1) }, nil)
	cancel()
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		go d.discard(path)
	}
}

// create makes our ephemeral sequential node in dir, named with infix and holding
// data, and returns its path. A create whose answer was lost with the connection is
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
	// Children that are named like lock nodes but are not ephemeral: planted (a
	// persistent node does not end with a session), never a holder.
	planted := map[string]bool{}
	// Children known to be a session's, for rules that count them (verifyError).
	owned := map[string]bool{}
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
		children = slices.DeleteFunc(children, func(c string) bool { return planted[c] })
		pred, mine, err := r(children, name, owned)
		if v := (*verifyError)(nil); errors.As(err, &v) {
			if err := d.verify(ctx, dir, v.nodes, owned, planted); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if !mine {
			return nil, fmt.Errorf("our lock node %s is gone (session expired?)", path)
		}
		if pred == "" {
			return d.hold(path, me.st, me.ev), nil
		}
		// Watch the predecessor (or, for a TryLock, only look at it): its stat says
		// whether a session owns it. One round trip either way, and a waiter needs it
		// anyway; a TryLock pays it only when it finds the key held.
		type watch struct {
			ok        bool
			ephemeral bool
			ev        <-chan zk.Event
		}
		w, err := call(ctx, func() (watch, error) {
			if pred == watchDir { // any change of the directory's children
				children, _, ev, err := d.conn.ChildrenW(dir)
				if err != nil {
					return watch{}, err
				}
				children = slices.DeleteFunc(children, func(c string) bool { return planted[c] })
				if p, _, err := r(children, name, owned); err != nil || p != watchDir {
					return watch{}, nil // changed already: look again (and learn why)
				}
				return watch{ok: true, ephemeral: true, ev: ev}, nil
			}
			var st *zk.Stat
			var ev <-chan zk.Event
			var err error
			if wait {
				_, st, ev, err = d.conn.GetW(dir + "/" + pred)
			} else {
				var ok bool
				ok, st, err = d.conn.Exists(dir + "/" + pred)
				if err == nil && !ok {
					err = zk.ErrNoNode
				}
			}
			if errors.Is(err, zk.ErrNoNode) {
				return watch{}, nil
			}
			return watch{ok: err == nil, ephemeral: st != nil && st.EphemeralOwner != 0, ev: ev}, err
		}, nil)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", pred, err)
		}
		if !w.ok {
			continue // gone already: look again
		}
		if !w.ephemeral {
			// Not a lock of anyone's: ignore it and look again. (Its watch, if set,
			// stays registered until the node changes: one buffered event, dropped.)
			planted[pred] = true
			continue
		}
		if !wait {
			return nil, driver.Busy(0)
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

// verify reads the stats of nodes (children of dir) at once and records which a
// session owns (owned) and which none does (planted). A node gone meanwhile is in
// neither: the next look at the directory leaves it out.
func (d *zkDriver) verify(ctx context.Context, dir string, nodes []string, owned, planted map[string]bool) error {
	type stat struct {
		node      string
		exists    bool
		ephemeral bool
	}
	stats, err := call(ctx, func() ([]stat, error) {
		out := make([]stat, len(nodes))
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, n := range nodes {
			wg.Go(func() { // go-zookeeper pipelines concurrent requests on one connection
				ok, st, err := d.conn.Exists(dir + "/" + n)
				out[i], errs[i] = stat{n, ok, ok && st.EphemeralOwner != 0}, err
			})
		}
		wg.Wait()
		return out, errors.Join(errs...)
	}, nil)
	if err != nil {
		return fmt.Errorf("read the stats of %d nodes in %s: %w", len(nodes), dir, err)
	}
	for _, s := range stats {
		switch {
		case s.ephemeral:
			owned[s.node] = true
		case s.exists:
			planted[s.node] = true
		}
	}
	return nil
}

// sessionNodes returns those of nodes (children of dir) that a session owns: the
// others were planted, or are gone.
func (d *zkDriver) sessionNodes(ctx context.Context, dir string, nodes []string) ([]string, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	owned := map[string]bool{}
	if err := d.verify(ctx, dir, nodes, owned, map[string]bool{}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(nodes), func(n string) bool { return !owned[n] }), nil
}

// parseSeq returns the sequence number of a lock node of this protocol (see
// parseSeqOf).
func parseSeq(name string) (seq int64, ok bool) { return parseSeqOf(name, lockInfix) }

// parseSeqOf returns the sequence number of a node named with infix ("lock-",
// "latch-"): infix followed by the 10 digits ZooKeeper appends to a sequential
// node, with or without the protection prefix "_c_<id>-" that dlock, go-zookeeper's
// zk.Lock (a 32-digit hex id) and Curator (a UUID) put before it. Any other child of
// the directory is not a node of this protocol: ok is false.
func parseSeqOf(name, infix string) (seq int64, ok bool) {
	if len(name) < len(infix)+seqDigits {
		return 0, false
	}
	digits := name[len(name)-seqDigits:]
	head, ok := strings.CutSuffix(name[:len(name)-seqDigits], infix)
	if !ok || head != "" && !protected(head) || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil
}

// protected reports whether head is a protection prefix: "_c_", an id of hex digits
// and dashes, "-".
func protected(head string) bool {
	id, ok := strings.CutPrefix(head, protectedPrefix)
	id, dash := strings.CutSuffix(id, "-")
	return ok && dash && id != "" && strings.Trim(id, "0123456789abcdefABCDEF-") == ""
}

// seqDigits is the width of the sequence number ZooKeeper appends to a sequential
// node's name.
const seqDigits = 10

// predecessor returns the child just before ours ("" if ours is the lowest), and
// whether ours is among children at all. Children that are not nodes of this
// protocol (named with infix), and those found planted, are ignored.
func predecessor(children []string, name string, seq int64, infix string) (pred string, mine bool) {
	best := int64(-1 << 63)
	for _, c := range children {
		if c == name {
			mine = true
			continue
		}
		s, ok := parseSeqOf(c, infix)
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

var errNodeDeleted = errors.New("lock node deleted")
