package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// The algorithm, per lock name key (queue = <prefix>/<escaped key>/):
//
//   - TryLock: one transaction: if no key exists under queue, put queue+<lease hex>
//     attached to our lease, valued with the Holder record (dlock.WithHolder) if
//     any, else empty (see describe.go). Only keys directly in queue are contenders
//     (contenders): when the keys under it all belong to a Locker on a nested prefix,
//     TryLock queues as Lock does and gives up if a contender came first.
//   - Lock (driver.Waiter): one transaction puts our key and reads the queue. The keys
//     created before ours (lower create revision) are our predecessors; we watch only
//     the last of them, from the revision of our put, until it is deleted, then the one
//     before it, and so on (a watch from that revision replays deletes we missed). When
//     none is left we own the lock; a read of our own key at a revision no older than
//     the last delete proves our lease did not end while we waited. The lease is kept
//     alive while we wait, not after.
//   - Refresh: renew the lease once (and check our key is still there); a TTL of
//     another bucket moves our key to a new lease in one guarded put.
//   - Unlock: delete our key if its create revision is still ours.
//   - Loss: a watch on our own key reports its deletion (lease revoked or expired,
//     key deleted by hand) through driver.Sessioned.

const (
	// retryPause is how long a failed watch (or release) waits before trying again.
	retryPause = 50 * time.Millisecond
	// lossWatchDelay is how long a lock is held before its key is watched for loss.
	lossWatchDelay = 50 * time.Millisecond
	// unlockAttempts bounds the tries of one Unlock (about a second of retries).
	unlockAttempts = 20
)

type etcdDriver struct {
	cli    *clientv3.Client
	prefix string
	owned  bool // Close closes cli
	leases leasePool

	ctx    context.Context // ends at Close: stops watches and keep-alives
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	held   map[heldID]string // lock key of each grant not yet released, for Fence
	closed bool              // Close has begun: no goroutine starts (background)
}

// background runs f in a goroutine that Close waits for, unless Close has begun:
// then f does not run and background returns false. (The WaitGroup's Add and Close's
// Wait are ordered by mu.)
func (d *etcdDriver) background(f func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
	return true
}

type heldID struct {
	key   string
	token uint64
}

func newDriver(cli *clientv3.Client, prefix string, owned bool) *etcdDriver {
	ctx, cancel := context.WithCancel(context.Background())
	return &etcdDriver{cli: cli, prefix: prefix, owned: owned, leases: leasePool{cli: cli},
		ctx: ctx, cancel: cancel, held: map[heldID]string{}}
}

func (d *etcdDriver) queue(key string) string { return QueueName(d.prefix, key) + "/" }

func lockKey(queue string, ls *lease) string {
	return queue + strconv.FormatInt(int64(ls.id), 16)
}

func (d *etcdDriver) heldKey(key string, token uint64) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name, ok := d.held[heldID{key, token}]
	return name, ok
}

// forget drops a lock that ended (released or lost) from held.
func (d *etcdDriver) forget(l *etcdLock) {
	d.mu.Lock()
	delete(d.held, heldID{l.key, uint64(l.rev)})
	d.mu.Unlock()
}

// heldCount reports how many grants held keeps (for tests).
func (d *etcdDriver) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held)
}

func (d *etcdDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.tryIn(ctx, key, d.queue(key), driver.AppendHolder(ctx, ""), ttl)
}

// tryIn takes the lock whose queue is queue (a mutex's, or an election's) for key,
// its key written with value, if nobody queues in it.
func (d *etcdDriver) tryIn(ctx context.Context, key, queue, value string, ttl time.Duration) (driver.Lock, error) {
	for retried := false; ; retried = true {
		ls, err := d.leases.get(ctx, ttl)
		if err != nil {
			return nil, err
		}
		name := lockKey(queue, ls)
		resp, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(queue), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(name, value, clientv3.WithLease(ls.id))).
			Else(clientv3.OpGet(queue, clientv3.WithPrefix(), clientv3.WithKeysOnly())).
			Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			continue // an idle lease ended behind our back: take another
		case err != nil:
			d.leases.revoke(ls) // the put may have been applied: its lease takes it away
			return nil, fmt.Errorf("etcd txn on %s: %w", queue, err)
		case !resp.Succeeded:
			d.leases.put(ls)
			if len(contenders(queue, resp.Responses[0].GetResponseRange().Kvs)) == 0 {
				// Only keys of a Locker whose prefix lies in the queue's range: queue
				// and look (the contenders before ours decide).
				return d.enqueue(ctx, key, queue, value, ttl, false, mutexRule)
			}
			return nil, driver.Busy(0)
		}
		return d.grant(key, name, value, resp.Header.Revision, resp.Header.Revision, ls), nil
	}
}

func (d *etcdDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, d.queue(key), driver.AppendHolder(ctx, ""), ttl, true, mutexRule)
}

// grant makes the lock for our key name (written with value, created at rev, seen
// still there at seen) and starts watching it for loss.
func (d *etcdDriver) grant(key, name, value string, rev, seen int64, ls *lease) *etcdLock {
	lk := &etcdLock{held: d.newHeld([]string{name}, value, rev, ls), key: key}
	lk.ended = func() { d.forget(lk) }
	d.mu.Lock()
	d.held[heldID{key, uint64(rev)}] = name
	d.mu.Unlock()
	lk.watch(name, seen)
	return lk
}

func (d *etcdDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.wg.Wait()
	d.leases.close()
	d.mu.Lock()
	clear(d.held)
	d.mu.Unlock()
	if d.owned {
		return d.cli.Close()
	}
	return nil
}

// etcdLock is one grant of the lock named key: our key in its queue.
type etcdLock struct {
	*held
	key string
}

// ValidFrom is when the lease behind the lock was last renewed (read before the
// request): a waiter's lease is kept alive while it queues, so its TTL runs from
// its last renewal, not from when Acquire began. The pool hands out leases that
// last at least the lock's TTL from then.
func (l *etcdLock) ValidFrom() time.Time {
	l.mu.Lock()
	ls := l.lease
	l.mu.Unlock()
	if ls == nil {
		return time.Time{}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.renewed
}

// held is one grant's keys, every one created at revision rev on one lease: a lock's
// key (etcdLock) or the keys of a set (etcdSet). A set is held while every key is.
type held struct {
	d         *etcdDriver
	names     []string
	value     string // what our keys hold (an election's leader value, a mutex's or a set's holder record)
	rev       int64
	watchCtx  context.Context
	stopWatch context.CancelFunc
	ended     func() // run when the grant ends (released or lost), under mu; may be nil

	mu       sync.Mutex // held across Unlock's request, so a delete we make is not taken for a loss
	lease    *lease     // nil while unknown (a move to another lease had an unknown outcome)
	released bool
	lost     chan struct{}
	cause    error
}

func (d *etcdDriver) newHeld(names []string, value string, rev int64, ls *lease) *held {
	h := &held{d: d, names: names, value: value, rev: rev, lease: ls, lost: make(chan struct{})}
	h.watchCtx, h.stopWatch = context.WithCancel(d.ctx)
	return h
}

// watch reports the loss of our key name, which was seen still there at revision
// seen. Most grants are held briefly: it watches only after lossWatchDelay, from
// seen+1, so a delete in that moment is not missed. After the driver's Close began
// the watch does not start (watchCtx is done anyway); the grant is given back by the
// Locker, which closes the driver only after its calls ended.
func (h *held) watch(name string, seen int64) {
	h.d.background(func() {
		if pause(h.watchCtx, lossWatchDelay) != nil {
			return
		}
		at, err := h.d.waitGone(h.watchCtx, &mvccpb.KeyValue{Key: []byte(name), CreateRevision: h.rev}, seen+1)
		if err == nil {
			h.markLost(name, at)
		}
	})
}

func (h *held) Token() uint64 { return uint64(h.rev) }

// Lost and Cause implement driver.Sessioned.
func (h *held) Lost() <-chan struct{} { return h.lost }

func (h *held) Cause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause
}

func (h *held) markLost(name string, at int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released || h.cause != nil {
		return
	}
	h.cause = &driver.LossError{Kind: driver.LossDeleted,
		Err: fmt.Errorf("etcd key %s was deleted by revision %d (lease ended or key deleted)", name, at)}
	if h.ended != nil {
		h.ended()
	}
	close(h.lost)
}

// owned are the comparisons "every key is still ours".
func (h *held) owned() []clientv3.Cmp {
	var cmps []clientv3.Cmp
	for _, n := range h.names {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(n), "=", h.rev))
	}
	return cmps
}

// deleteOurs deletes, in one transaction, every key that is still ours, and
// reports whether all of them were.
func (h *held) deleteOurs(ctx context.Context) (bool, error) {
	var ops []clientv3.Op
	for _, n := range h.names {
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(n), "=", h.rev)},
			[]clientv3.Op{clientv3.OpDelete(n)}, nil))
	}
	resp, err := h.d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("etcd txn: %w", err)
	}
	all := true
	for _, r := range resp.Responses {
		all = all && r.GetResponseTxn().Succeeded
	}
	return all, nil
}

func (h *held) notHeld() error {
	if len(h.names) == 1 {
		return fmt.Errorf("%w: etcd key %s (create revision %d) is gone", dlock.ErrNotHeld, h.names[0], h.rev)
	}
	return fmt.Errorf("%w: a key of the set (create revision %d) is gone", dlock.ErrNotHeld, h.rev)
}

// lostSome gives back the keys of a set that are still ours once one of them is
// gone (a set is held only whole); a single key has nothing to give back.
func (h *held) lostSome(ctx context.Context) {
	if len(h.names) > 1 {
		_, _ = h.deleteOurs(ctx)
	}
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	h.mu.Lock()
	cur := h.lease
	h.mu.Unlock()
	if cur != nil && cur.secs == leaseSecs(ttl) {
		resp, err := h.d.cli.Txn(ctx).If(h.owned()...).Commit()
		switch {
		case err != nil:
			return fmt.Errorf("etcd txn: %w", err)
		case !resp.Succeeded:
			h.lostSome(ctx)
			return h.notHeld()
		}
		return cur.renew(ctx, h.d.cli)
	}
	// Another TTL bucket: move our keys to a lease of that TTL.
	nl, err := h.d.leases.get(ctx, ttl)
	if err != nil {
		return err
	}
	var puts []clientv3.Op
	for _, n := range h.names {
		puts = append(puts, clientv3.OpPut(n, h.value, clientv3.WithLease(nl.id)))
	}
	resp, err := h.d.cli.Txn(ctx).If(h.owned()...).Then(puts...).Commit()
	switch {
	case err != nil:
		// Our keys are on cur or on nl: neither can be trusted nor revoked.
		h.mu.Lock()
		h.lease = nil
		h.mu.Unlock()
		return fmt.Errorf("etcd txn: %w", err)
	case !resp.Succeeded:
		h.d.leases.put(nl)
		h.lostSome(ctx)
		return h.notHeld()
	}
	h.mu.Lock()
	h.lease = nl
	h.mu.Unlock()
	if cur != nil {
		h.d.leases.put(cur)
	}
	return nil
}

func (h *held) Unlock(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return h.notHeld()
	}
	// The delete is guarded by our create revision, so retrying it is harmless: retry
	// what an election or a member going away makes fail, while ctx allows.
	var all bool
	var err error
	for range unlockAttempts {
		all, err = h.deleteOurs(ctx)
		if err == nil || pause(ctx, retryPause) != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	h.released = true
	h.stopWatch()
	if h.ended != nil {
		h.ended()
	}
	if !all {
		return h.notHeld()
	}
	if h.lease != nil {
		h.d.leases.put(h.lease)
	}
	return nil
}
