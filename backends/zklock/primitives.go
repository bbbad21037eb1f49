package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks, in Apache Curator's node layouts, in the key's
// lock directory D = LockDir(root, key) — the path a Curator recipe is given:
//
//   - read-write lock (Curator's InterProcessReadWriteLock on D): ephemeral
//     sequential nodes "_c_<guid>-__READ__<seq>" and "_c_<guid>-__WRIT__<seq>" in D.
//     A writer holds once no read or write node comes before its own; a reader once
//     no write node does. Waiters are served by sequence, and a waiting writer keeps
//     every later reader out (writer preference). A waiter watches the node it waits
//     for.
//   - semaphore (Curator's InterProcessSemaphoreV2 on D): holders are ephemeral
//     sequential nodes in D/leases; a permit is held while the number of nodes there
//     is at most the limit. Acquirers queue on the mutex D/locks (the lock recipe of
//     this package): its holder creates its lease node, counts, and waits (watching
//     D/leases) until the count allows it, then releases D/locks. dlock first tries
//     without queueing when nobody is queued on D/locks: lease node, count, and back
//     out if over. dlock's lease nodes are named "_c_<guid>-limit<N>-lease-<seq>",
//     so that dlock clients see each other's limits (Curator's "lease-" nodes have
//     none and are counted, not compared).
//
// Leases last as long as the session, as the mutex's do; the token is the node's
// creation zxid. A Curator client using the same path shares the primitive with
// dlock (TestCuratorInterop). A key's mutex nodes ("…-lock-<seq>" in D) are
// ignored by both recipes: the mutex is another lock. A read-write lock that finds
// lease nodes in D/leases, or a semaphore that finds read or write nodes in D,
// takes its node out again and fails with dlock.ErrConflict. Only nodes that a
// session owns (ephemeral) and that are named as the recipe names them count, as
// for the mutex: a node planted with the world ACL (in D/leases, D/locks or D)
// holds no permit, queues nobody and is no conflict.

const (
	readInfix  = "__READ__" // Curator's names: same length, so that the sequence is found alike
	writeInfix = "__WRIT__"
	leasesDir  = "leases"
	locksDir   = "locks"
	leaseInfix = "lease-"
)

func (d *zkDriver) TryLockRW(ctx context.Context, key string, shared bool, _ time.Duration) (driver.Lock, error) {
	return d.lockRW(ctx, key, shared, false)
}

func (d *zkDriver) LockRW(ctx context.Context, key string, shared bool, _ time.Duration) (driver.Lock, error) {
	return d.lockRW(ctx, key, shared, true)
}

func (d *zkDriver) lockRW(ctx context.Context, key string, shared, wait bool) (driver.Lock, error) {
	dir := LockDir(d.cfg.root, key)
	infix := writeInfix
	if shared {
		infix = readInfix
	}
	check := func() error { // a semaphore's lease nodes: a conflict
		n, err := d.children(dir + "/" + leasesDir)
		if err == nil {
			n, err = d.sessionNodes(context.Background(), dir+"/"+leasesDir, slices.DeleteFunc(n, func(c string) bool {
				_, ok := leaseNode(c)
				return !ok
			}))
		}
		if err == nil && len(n) > 0 {
			return fmt.Errorf("%w: %q is in use as a semaphore (%d lease nodes)", dlock.ErrConflict, key, len(n))
		}
		return err
	}
	return asLock(d.acquire(ctx, dir, infix, holderData(ctx), wait, rwRule(shared), check))
}

// children lists dir; a missing dir has none.
func (d *zkDriver) children(dir string) ([]string, error) {
	c, _, err := d.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	return c, err
}

// rwSeq returns the sequence of a read or write node and whether it is a writer.
func rwSeq(name string) (seq int64, writer, ok bool) {
	for _, infix := range []string{readInfix, writeInfix} {
		if i := strings.LastIndex(name, infix); i >= 0 {
			n, err := strconv.ParseInt(name[i+len(infix):], 10, 64)
			return n, infix == writeInfix, err == nil
		}
	}
	return 0, false, false
}

// rwRule: a writer waits for every read or write node before its own (it watches
// the last of them), a reader for every write node before its own (the last).
func rwRule(shared bool) rule {
	return func(children []string, name string, _ map[string]bool) (string, bool, error) {
		seq, _, ok := rwSeq(name)
		if !ok {
			return "", false, fmt.Errorf("unexpected read-write node name %q", name)
		}
		best, watch, mine := int64(-1<<63), "", false
		for _, c := range children {
			if c == name {
				mine = true
				continue
			}
			s, writer, ok := rwSeq(c)
			if ok && s < seq && s > best && (writer || !shared) {
				best, watch = s, c
			}
		}
		return watch, mine, nil
	}
}

func (d *zkDriver) TryLockSemaphore(ctx context.Context, key string, limit int, _ time.Duration) (driver.Lock, error) {
	lk, err := d.trySemaphore(ctx, key, limit)
	return asLock(lk, err)
}

// LockSemaphore tries without queueing first; when the semaphore is full or others
// queue, it queues on D/locks as Curator does.
func (d *zkDriver) LockSemaphore(ctx context.Context, key string, limit int, _ time.Duration) (driver.Lock, error) {
	lk, err := d.trySemaphore(ctx, key, limit)
	var busy *driver.BusyError
	if !errors.As(err, &busy) {
		return asLock(lk, err)
	}
	dir := LockDir(d.cfg.root, key)
	line, err := d.acquire(ctx, dir+"/"+locksDir, lockInfix, holderData(ctx), true, mutexRule, nil)
	if err != nil {
		return nil, err
	}
	defer func() { // leave D/locks for the next in line, in the background if need be
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if line.Unlock(uctx) != nil {
			go d.discard(line.path)
		}
	}()
	return asLock(d.lease(ctx, key, limit, true))
}

// trySemaphore takes a permit without queueing: Busy when somebody queues on
// D/locks (a session's lock node: a planted one queues nobody) or the count of
// lease nodes (ours included) goes over limit.
func (d *zkDriver) trySemaphore(ctx context.Context, key string, limit int) (*zkLock, error) {
	dir := LockDir(d.cfg.root, key)
	line, err := call(ctx, func() ([]string, error) { return d.children(dir + "/" + locksDir) }, nil)
	if err != nil {
		return nil, err
	}
	line = slices.DeleteFunc(line, func(c string) bool {
		_, ok := parseSeq(c)
		return !ok
	})
	if line, err = d.sessionNodes(ctx, dir+"/"+locksDir, line); err != nil {
		return nil, err
	}
	if len(line) > 0 {
		return nil, driver.Busy(0)
	}
	return d.lease(ctx, key, limit, false)
}

// lease creates our lease node and holds it once the count allows (waiting for
// that with wait); it checks the limits of the other dlock nodes and, once, that
// no read-write lock holds the key.
func (d *zkDriver) lease(ctx context.Context, key string, limit int, wait bool) (*zkLock, error) {
	dir := LockDir(d.cfg.root, key)
	check := func() error { // a read-write lock's nodes: a conflict
		c, err := d.children(dir)
		if err == nil {
			c, err = d.sessionNodes(context.Background(), dir, slices.DeleteFunc(c, func(n string) bool {
				_, _, ok := rwSeq(n)
				return !ok
			}))
		}
		if err == nil && len(c) > 0 {
			return fmt.Errorf("%w: %q is in use as a read-write lock (node %s)", dlock.ErrConflict, key, c[0])
		}
		return err
	}
	infix := "limit" + strconv.Itoa(limit) + "-" + leaseInfix
	return d.acquire(ctx, dir+"/"+leasesDir, infix, holderData(ctx), wait, semaphoreRule(key, limit), check)
}

// watchDir is the node semaphoreRule asks to watch while the lease nodes are over
// the limit: the directory itself (any change of its children).
const watchDir = "."

// semaphoreRule: our lease node holds a permit while the lease nodes number at
// most limit; a dlock node of another limit is a conflict. Only lease nodes that a
// session owns count: a rule over the limit, or facing a conflict, first has the
// nodes it would count verified (verifyError), so that a node planted in D/leases
// (the default ACL lets any client create one) holds no permit for ever.
func semaphoreRule(key string, limit int) rule {
	return func(children []string, name string, owned map[string]bool) (string, bool, error) {
		var leases, unknown []string
		mine := false
		for _, c := range children {
			if c == name {
				mine = true
				continue
			}
			n, ok := leaseNode(c)
			switch {
			case !ok: // not a lease node of either layout
				continue
			case n != 0 && n != limit && !owned[c]:
				return "", false, &verifyError{[]string{c}}
			case n != 0 && n != limit:
				return "", false, fmt.Errorf("%w: %q is in use as a semaphore with limit %d, not %d", dlock.ErrConflict, key, n, limit)
			}
			leases = append(leases, c)
			if !owned[c] {
				unknown = append(unknown, c)
			}
		}
		switch {
		case !mine:
			return "", false, nil
		case len(leases) < limit: // with ours, at most limit
			return "", true, nil
		case len(unknown) > 0:
			return "", true, &verifyError{unknown}
		}
		return watchDir, true, nil
	}
}

// leaseNode reads a lease node's name: dlock's "_c_<id>-limit<N>-lease-<seq>"
// (limit N) or Curator's "[_c_<id>-]lease-<seq>" (limit 0: Curator's nodes carry
// none). ok is false for any other name.
func leaseNode(name string) (limit int, ok bool) {
	if len(name) < len(leaseInfix)+seqDigits || strings.Trim(name[len(name)-seqDigits:], "0123456789") != "" {
		return 0, false
	}
	head, ok := strings.CutSuffix(name[:len(name)-seqDigits], leaseInfix)
	if !ok || head == "" {
		return 0, ok
	}
	if protected(head) {
		return 0, true
	}
	head, digits, ok := strings.Cut(head, "-limit")
	digits, dash := strings.CutSuffix(digits, "-")
	if !ok || !dash || !protected(head+"-") || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n > 0
}
