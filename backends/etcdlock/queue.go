package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// The queue engine: a grant by the order of create revisions in a key's queue, the
// wait for predecessors (one watch at a time), and the lease kept alive while a
// waiter queues. The mutex, the semaphores, the read-write locks and the elections
// all run on it, each with its rule.

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
	if !strings.HasPrefix(queue, d.prefix+"/"+primitivesDir+"/") {
		get = append(get, clientv3.WithKeysOnly()) // only the primitives' rules read values
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
		for _, kv := range contenders(queue, resp.Responses[1].GetResponseRange().Kvs) {
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

// contenders keeps the keys of kvs (read under queue) that are contenders of
// queue: queue + <lease ID>. A key with a further '/' belongs to a Locker whose
// prefix lies inside the queue's range (the prefix /p/a keeps everything under /p's
// queue of the key "a", /p/a/): no contender, whatever it holds.
func contenders(queue string, kvs []*mvccpb.KeyValue) []*mvccpb.KeyValue {
	return slices.DeleteFunc(kvs, func(kv *mvccpb.KeyValue) bool {
		return strings.Contains(string(kv.Key[len(queue):]), "/")
	})
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
