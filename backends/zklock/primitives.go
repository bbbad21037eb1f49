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
// takes its node out again and fails with dlock.ErrConflict.

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
		if err == nil && len(n) > 0 {
			return fmt.Errorf("%w: %q is in use as a semaphore (%d lease nodes)", dlock.ErrConflict, key, len(n))
		}
		return err
	}
	return asLock(d.acquire(ctx, dir, infix, nil, wait, rwRule(shared), check))
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
	return func(children []string, name string) (string, bool, error) {
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
	line, err := d.acquire(ctx, dir+"/"+locksDir, lockInfix, nil, true, mutexRule, nil)
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
// D/locks or the count of lease nodes (ours included) goes over limit.
func (d *zkDriver) trySemaphore(ctx context.Context, key string, limit int) (*zkLock, error) {
	dir := LockDir(d.cfg.root, key)
	line, err := call(ctx, func() ([]string, error) { return d.children(dir + "/" + locksDir) }, nil)
	if err != nil {
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
	check := func() error {
		c, err := d.children(dir)
		for _, n := range c {
			if _, _, ok := rwSeq(n); ok {
				return fmt.Errorf("%w: %q is in use as a read-write lock (node %s)", dlock.ErrConflict, key, n)
			}
		}
		return err
	}
	infix := "limit" + strconv.Itoa(limit) + "-" + leaseInfix
	return d.acquire(ctx, dir+"/"+leasesDir, infix, nil, wait, semaphoreRule(key, limit), check)
}

// watchDir is the node semaphoreRule asks to watch while the lease nodes are over
// the limit: the directory itself (any change of its children).
const watchDir = "."

// semaphoreRule: our lease node holds a permit while the lease nodes number at
// most limit; a dlock node of another limit is a conflict.
func semaphoreRule(key string, limit int) rule {
	return func(children []string, name string) (string, bool, error) {
		for _, c := range children {
			if n, ok := leaseLimit(c); ok && n != limit {
				return "", false, fmt.Errorf("%w: %q is in use as a semaphore with limit %d, not %d", dlock.ErrConflict, key, n, limit)
			}
		}
		if !slices.Contains(children, name) {
			return "", false, nil
		}
		if len(children) <= limit {
			return "", true, nil
		}
		return watchDir, true, nil
	}
}

// leaseLimit reads the limit from the name of a dlock lease node.
func leaseLimit(name string) (int, bool) {
	_, rest, ok := strings.Cut(name, "-limit")
	if !ok {
		return 0, false
	}
	digits, _, ok := strings.Cut(rest, "-"+leaseInfix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}
