package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
)

// Sets of keys (dlock.AcquireAll): one transaction puts a key into every key's
// queue, all on one lease, if every queue is empty. The keys are created at one
// revision, which is each key's token (above every earlier grant of each key). A
// waiting AcquireAll queues in one key's queue at a time (dlock's generic wait).

var _ driver.MultiLocker = (*etcdDriver)(nil)

func (d *etcdDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	for retried := false; ; retried = true {
		ls, err := d.leases.get(ctx, ttl)
		if err != nil {
			return nil, err
		}
		value := driver.AppendHolder(ctx, "") // the Holder record, as a mutex's key holds it
		names, queues := make([]string, len(keys)), make([]string, len(keys))
		var empty []clientv3.Cmp
		var puts, gets []clientv3.Op
		for i, k := range keys {
			queues[i] = d.queue(k)
			names[i] = lockKey(queues[i], ls)
			empty = append(empty, clientv3.Compare(clientv3.CreateRevision(queues[i]), "=", 0).WithPrefix())
			puts = append(puts, clientv3.OpPut(names[i], value, clientv3.WithLease(ls.id)))
			gets = append(gets, clientv3.OpGet(queues[i], clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		}
		resp, err := d.cli.Txn(ctx).If(empty...).Then(puts...).Else(gets...).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			continue
		case err != nil:
			d.leases.revoke(ls)
			return nil, fmt.Errorf("etcd txn on %d queues: %w", len(keys), err)
		case !resp.Succeeded:
			d.leases.put(ls)
			for i, q := range queues {
				if len(contenders(q, resp.Responses[i].GetResponseRange().Kvs)) > 0 {
					return nil, driver.Busy(0)
				}
			}
			// Only keys of Lockers whose prefixes lie in the queues' ranges.
			return d.tryAllQueued(ctx, keys, value, ttl)
		}
		return d.holdSet(names, value, resp.Header.Revision, ls), nil
	}
}

// tryAllQueued takes keys as TryLockAll does, when their queues hold keys that are
// no contenders (nested prefixes, see contenders): it puts our key into every queue
// and reads the queues in one transaction, and keeps the keys if no contender came
// before ours in any queue; else it takes them out again (Busy).
func (d *etcdDriver) tryAllQueued(ctx context.Context, keys []string, value string, ttl time.Duration) (driver.Lock, error) {
	ls, err := d.leases.get(ctx, ttl)
	if err != nil {
		return nil, err
	}
	names, queues := make([]string, len(keys)), make([]string, len(keys))
	var ops []clientv3.Op
	for i, k := range keys {
		queues[i] = d.queue(k)
		names[i] = lockKey(queues[i], ls)
		ops = append(ops, clientv3.OpPut(names[i], value, clientv3.WithLease(ls.id)))
	}
	for _, q := range queues {
		ops = append(ops, clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		d.leases.revoke(ls) // the puts may have been applied: the lease takes them away
		return nil, fmt.Errorf("etcd txn on %d queues: %w", len(keys), err)
	}
	rev := resp.Header.Revision
	for i, q := range queues {
		for _, kv := range contenders(q, resp.Responses[len(keys)+i].GetResponseRange().Kvs) {
			if kv.CreateRevision < rev {
				d.leases.revoke(ls) // takes our keys out
				return nil, driver.Busy(0)
			}
		}
	}
	return d.holdSet(names, value, rev, ls), nil
}

// holdSet makes the grant of a set: our keys names, valued value, created at rev on
// ls, each watched for its loss.
func (d *etcdDriver) holdSet(names []string, value string, rev int64, ls *lease) *etcdSet {
	s := &etcdSet{d.newHeld(names, value, rev, ls)}
	for _, name := range names {
		s.watch(name, rev)
	}
	return s
}

// etcdSet is one grant of a set: a key in each queue, created at revision rev.
type etcdSet struct{ *held }

func (s *etcdSet) Tokens() []uint64 {
	ts := make([]uint64, len(s.names))
	for i := range ts {
		ts[i] = uint64(s.rev)
	}
	return ts
}
