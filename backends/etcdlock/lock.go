package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
//     attached to our lease.
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

	mu   sync.Mutex
	held map[heldID]string // lock key of each grant not yet released, for Fence
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
	return d.tryIn(ctx, key, d.queue(key), "", ttl)
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
			Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			continue // an idle lease ended behind our back: take another
		case err != nil:
			d.leases.revoke(ls) // the put may have been applied: its lease takes it away
			return nil, fmt.Errorf("etcd txn on %s: %w", queue, err)
		case !resp.Succeeded:
			d.leases.put(ls)
			return nil, driver.Busy(0)
		}
		return d.grant(key, name, value, resp.Header.Revision, resp.Header.Revision, ls), nil
	}
}

func (d *etcdDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, key, d.queue(key), "", ttl, true, mutexRule)
}

// rule decides, from the keys queued before ours (preds) and after it (later),
// which of preds must be gone before ours is granted and how many of them may stay;
// or refuses the grant (a conflict).
type rule func(preds, later []*mvccpb.KeyValue) (waitFor []*mvccpb.KeyValue, keep int, err error)

// mutexRule: every key queued before ours must go.
func mutexRule(preds, _ []*mvccpb.KeyValue) ([]*mvccpb.KeyValue, int, error) { return preds, 0, nil }

// enqueue puts our key (with value) into queue and takes the lock as r decides:
// at once, or — with wait — after waiting in the queue; without wait it takes our
// key out again and returns Busy.
func (d *etcdDriver) enqueue(ctx context.Context, key, queue, value string, ttl time.Duration, wait bool, r rule) (driver.Lock, error) {
	get := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
	if value == "" {
		get = append(get, clientv3.WithKeysOnly())
	}
	for retried := false; ; {
		ls, err := d.leases.get(ctx, ttl)
		if err != nil {
			return nil, err
		}
		name := lockKey(queue, ls)
		resp, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", 0)).
			Then(clientv3.OpPut(name, value, clientv3.WithLease(ls.id)), clientv3.OpGet(queue, get...)).
			Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			retried = true
			continue
		case err != nil:
			d.leases.revoke(ls)
			return nil, fmt.Errorf("etcd txn on %s: %w", queue, err)
		case !resp.Succeeded: // cannot happen: a lease carries one key at a time
			d.leases.revoke(ls)
			return nil, fmt.Errorf("etcd: %s already exists", name)
		}
		rev := resp.Header.Revision
		var preds, later []*mvccpb.KeyValue
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			switch {
			case kv.CreateRevision < rev:
				preds = append(preds, kv)
			case string(kv.Key) != name:
				later = append(later, kv)
			}
		}
		waitFor, keep, err := r(preds, later)
		switch {
		case err != nil:
			d.dequeue(name, rev, ls)
			return nil, err
		case len(waitFor) <= keep:
			return d.grant(key, name, value, rev, rev, ls), nil
		case !wait:
			d.dequeue(name, rev, ls)
			return nil, driver.Busy(0)
		}
		seen, err := d.wait(ctx, queue, name, rev, waitFor, keep, ls)
		if err == nil {
			// The lease was renewed every third of its TTL while we queued: renew it
			// once more, so that the lock is valid for its whole TTL from the grant.
			err = ls.renew(ctx, d.cli)
			if errors.Is(err, dlock.ErrNotHeld) {
				err = errLeaseLost
			}
		}
		switch {
		case errors.Is(err, errLeaseLost) && ctx.Err() == nil:
			continue // we dropped out of the queue: queue again with a new lease
		case err != nil:
			d.leases.revoke(ls) // leaves the queue: the lease takes our key away
			return nil, err
		}
		return d.grant(key, name, value, rev, seen, ls), nil
	}
}

// dequeue deletes our key (created at rev) and puts its lease back in the pool; if
// the delete fails, it revokes the lease, which takes the key away.
func (d *etcdDriver) dequeue(name string, rev int64, ls *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	resp, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(name), "=", rev)).
		Then(clientv3.OpDelete(name)).Commit()
	if err != nil || !resp.Succeeded {
		d.leases.revoke(ls)
		return
	}
	d.leases.put(ls)
}

// wait waits until at most keep of preds (keys queued before ours, by create
// revision, as of revision rev) exist, keeping our lease alive meanwhile. It returns
// a revision at which our key was still there and enough of preds were gone.
// errLeaseLost: our key is gone.
func (d *etcdDriver) wait(ctx context.Context, queue, name string, rev int64, preds []*mvccpb.KeyValue, keep int, ls *lease) (int64, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.keepAlive(wctx, ls, cancel)
	}()
	last, err := d.waitPreds(wctx, queue, rev, preds, keep)
	if err != nil {
		if c := context.Cause(wctx); errors.Is(c, errLeaseLost) {
			return 0, c
		}
		return 0, fmt.Errorf("waiting in %s: %w", queue, err)
	}
	cancel(nil)
	wg.Wait()
	// Our key must have outlived the last predecessor.
	at, gone, err := d.goneAt(ctx, &mvccpb.KeyValue{Key: []byte(name), CreateRevision: rev}, last)
	switch {
	case err != nil:
		return 0, err
	case gone:
		return 0, errLeaseLost
	}
	return at, nil
}

// waitPreds waits until at most keep of preds exist and returns a revision at
// which that was so. With keep 0 it watches the latest of preds still there, then
// reads once which of the others are left (most are gone by then: they held the
// lock before it), and so on: a release wakes one waiter, and a hand-off costs a
// waiter one watch and one read however long the queue. Otherwise it watches the
// whole queue.
func (d *etcdDriver) waitPreds(ctx context.Context, queue string, rev int64, preds []*mvccpb.KeyValue, keep int) (int64, error) {
	last := rev
	if keep == 0 {
		left := slices.Clone(preds) // by create revision, ascending
		for len(left) > 0 {
			at, err := d.waitGone(ctx, left[len(left)-1], 0)
			if err != nil {
				return 0, err
			}
			last = max(last, at)
			left = left[:len(left)-1]
			if len(left) == 0 {
				break
			}
			resp, err := d.cli.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(rev-1))
			if err != nil {
				if err := pause(ctx, retryPause); err != nil {
					return 0, err
				}
				continue // no read: wait for the next one in turn (it returns at once if gone)
			}
			present := map[string]int64{}
			for _, kv := range resp.Kvs {
				present[string(kv.Key)] = kv.CreateRevision
			}
			left = slices.DeleteFunc(left, func(kv *mvccpb.KeyValue) bool { return present[string(kv.Key)] != kv.CreateRevision })
			last = max(last, resp.Header.Revision)
		}
		return last, nil
	}
	left := map[string]int64{} // key → create revision
	for _, kv := range preds {
		left[string(kv.Key)] = kv.CreateRevision
	}
	from := rev + 1
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range d.cli.Watch(wctx, queue, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(from)) {
			if wr.Err() != nil {
				break // compacted, no leader, cancelled: read the queue itself
			}
			for _, ev := range wr.Events {
				if cr, ok := left[string(ev.Kv.Key)]; ok && ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > cr {
					delete(left, string(ev.Kv.Key))
					last = max(last, ev.Kv.ModRevision)
				}
			}
			if len(left) <= keep {
				cancel()
				return last, nil
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		resp, err := d.cli.Get(ctx, queue, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			if err := pause(ctx, retryPause); err != nil {
				return 0, err
			}
			continue
		}
		present := map[string]int64{}
		for _, kv := range resp.Kvs {
			present[string(kv.Key)] = kv.CreateRevision
		}
		for k, cr := range left {
			if present[k] != cr {
				delete(left, k)
			}
		}
		last, from = max(last, resp.Header.Revision), resp.Header.Revision+1
		if len(left) <= keep {
			return last, nil
		}
	}
}

// keepAlive renews ls every third of its TTL until ctx ends; if the server says the
// lease is gone it cancels ctx with errLeaseLost.
func (d *etcdDriver) keepAlive(ctx context.Context, ls *lease, lost context.CancelCauseFunc) {
	every := ls.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := ls.renew(rctx, d.cli)
		cancel()
		if errors.Is(err, dlock.ErrNotHeld) {
			lost(errLeaseLost)
			return
		}
		t.Reset(every)
	}
}

// waitGone waits until kv (that key at that create revision) is deleted and returns
// a revision at which it was gone. With from > 0 it watches from that revision (a
// watch that starts in the past can take the server ~100ms to set up); with from == 0
// it watches from now and first reads the key at a revision no older than the
// watch's start, to learn of a delete that came before it.
func (d *etcdDriver) waitGone(ctx context.Context, kv *mvccpb.KeyValue, from int64) (int64, error) {
	key := string(kv.Key)
	for {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
		if from > 0 {
			opts = append(opts, clientv3.WithRev(from))
		}
		for wr := range d.cli.Watch(wctx, key, opts...) {
			if wr.Err() != nil {
				break // compacted, no leader, cancelled: look at the key itself
			}
			if wr.Created && from == 0 {
				// Read at a revision that has both the watch's start and kv.
				at, gone, err := d.goneAt(ctx, kv, max(wr.Header.Revision, kv.CreateRevision))
				if err != nil || gone {
					cancel()
					return at, err
				}
			}
			for _, ev := range wr.Events {
				// A member that lags may replay the delete of an earlier key of the
				// same name (leases are reused): only a later delete is kv's.
				if ev.Type == mvccpb.DELETE && ev.Kv.ModRevision > kv.CreateRevision {
					cancel()
					return ev.Kv.ModRevision, nil
				}
			}
		}
		cancel()
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		// The watch ended: read the key, then watch again from there.
		at, gone, err := d.goneAt(ctx, kv, 0)
		switch {
		case err == nil && gone:
			return at, nil
		case err == nil:
			from = at + 1
		default:
			if err := pause(ctx, retryPause); err != nil {
				return 0, err
			}
		}
	}
}

// goneAt reads kv's key at a revision no older than min and reports whether kv was
// gone (deleted, or replaced by a key of another create revision), and the revision
// read. A serializable read from the member at hand does if it has seen min.
func (d *etcdDriver) goneAt(ctx context.Context, kv *mvccpb.KeyValue, min int64) (int64, bool, error) {
	resp, err := d.cli.Get(ctx, string(kv.Key), clientv3.WithSerializable())
	if err == nil && (min == 0 || resp.Header.Revision < min) {
		resp, err = d.cli.Get(ctx, string(kv.Key))
	}
	if err != nil {
		return 0, false, fmt.Errorf("etcd get %s: %w", kv.Key, err)
	}
	gone := len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision
	return resp.Header.Revision, gone, nil
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// grant makes the lock for our key name (written with value, created at rev, seen
// still there at seen) and starts watching it for loss.
func (d *etcdDriver) grant(key, name, value string, rev, seen int64, ls *lease) *etcdLock {
	lk := &etcdLock{d: d, key: key, name: name, value: value, rev: rev, lease: ls, lost: make(chan struct{})}
	lk.watchCtx, lk.stopWatch = context.WithCancel(d.ctx)
	d.mu.Lock()
	d.held[heldID{key, uint64(rev)}] = name
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		// Most locks are held briefly: watch only those still held after a moment.
		// The watch starts at seen+1, so a delete in that moment is not missed.
		if pause(lk.watchCtx, lossWatchDelay) != nil {
			return
		}
		kv := &mvccpb.KeyValue{Key: []byte(name), CreateRevision: rev}
		at, err := d.waitGone(lk.watchCtx, kv, seen+1)
		if err == nil {
			lk.markLost(at)
		}
	}()
	return lk
}

func (d *etcdDriver) Close() error {
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

// etcdLock is one grant: our key name, created at revision rev.
type etcdLock struct {
	d         *etcdDriver
	key       string
	name      string
	value     string // what our key holds (an election's leader value)
	rev       int64
	watchCtx  context.Context
	stopWatch context.CancelFunc

	mu       sync.Mutex // held across Unlock's request, so a delete we make is not taken for a loss
	lease    *lease     // nil while unknown (a move to another lease had an unknown outcome)
	released bool
	lost     chan struct{}
	cause    error
}

func (l *etcdLock) Token() uint64 { return uint64(l.rev) }

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

// Lost and Cause implement driver.Sessioned.
func (l *etcdLock) Lost() <-chan struct{} { return l.lost }

func (l *etcdLock) Cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

func (l *etcdLock) markLost(at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.cause != nil {
		return
	}
	l.cause = fmt.Errorf("etcd key %s was deleted by revision %d (lease ended or key deleted)", l.name, at)
	l.d.forget(l)
	close(l.lost)
}

// owned is the comparison "our key is still ours".
func (l *etcdLock) owned() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.name), "=", l.rev)
}

func (l *etcdLock) notHeld() error {
	return fmt.Errorf("%w: etcd key %s (create revision %d) is gone", dlock.ErrNotHeld, l.name, l.rev)
}

func (l *etcdLock) Refresh(ctx context.Context, ttl time.Duration) error {
	l.mu.Lock()
	cur := l.lease
	l.mu.Unlock()
	if cur != nil && cur.secs == leaseSecs(ttl) {
		resp, err := l.d.cli.Txn(ctx).If(l.owned()).Commit()
		switch {
		case err != nil:
			return fmt.Errorf("etcd txn: %w", err)
		case !resp.Succeeded:
			return l.notHeld()
		}
		return cur.renew(ctx, l.d.cli)
	}
	// Another TTL bucket: move our key to a lease of that TTL.
	nl, err := l.d.leases.get(ctx, ttl)
	if err != nil {
		return err
	}
	resp, err := l.d.cli.Txn(ctx).If(l.owned()).
		Then(clientv3.OpPut(l.name, l.value, clientv3.WithLease(nl.id))).Commit()
	switch {
	case err != nil:
		// Our key is on cur or on nl: neither can be trusted nor revoked.
		l.mu.Lock()
		l.lease = nil
		l.mu.Unlock()
		return fmt.Errorf("etcd txn: %w", err)
	case !resp.Succeeded:
		l.d.leases.put(nl)
		return l.notHeld()
	}
	l.mu.Lock()
	l.lease = nl
	l.mu.Unlock()
	if cur != nil {
		l.d.leases.put(cur)
	}
	return nil
}

func (l *etcdLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return l.notHeld()
	}
	// The delete is guarded by our create revision, so retrying it is harmless: retry
	// what an election or a member going away makes fail, while ctx allows.
	var resp *clientv3.TxnResponse
	var err error
	for range unlockAttempts {
		resp, err = l.d.cli.Txn(ctx).If(l.owned()).Then(clientv3.OpDelete(l.name)).Commit()
		if err == nil || pause(ctx, retryPause) != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("etcd txn: %w", err)
	}
	l.released = true
	l.stopWatch()
	l.d.forget(l)
	if !resp.Succeeded {
		return l.notHeld()
	}
	if l.lease != nil {
		l.d.leases.put(l.lease)
	}
	return nil
}
