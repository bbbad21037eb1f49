package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
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
		names := make([]string, len(keys))
		var empty []clientv3.Cmp
		var puts []clientv3.Op
		for i, k := range keys {
			queue := d.queue(k)
			names[i] = lockKey(queue, ls)
			empty = append(empty, clientv3.Compare(clientv3.CreateRevision(queue), "=", 0).WithPrefix())
			puts = append(puts, clientv3.OpPut(names[i], "", clientv3.WithLease(ls.id)))
		}
		resp, err := d.cli.Txn(ctx).If(empty...).Then(puts...).Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried:
			continue
		case err != nil:
			d.leases.revoke(ls)
			return nil, fmt.Errorf("etcd txn on %d queues: %w", len(keys), err)
		case !resp.Succeeded:
			d.leases.put(ls)
			return nil, driver.Busy(0)
		}
		rev := resp.Header.Revision
		s := &etcdSet{d: d, names: names, rev: rev, lease: ls, lost: make(chan struct{})}
		s.watchCtx, s.stopWatch = context.WithCancel(d.ctx)
		for _, name := range names {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				if pause(s.watchCtx, lossWatchDelay) != nil {
					return
				}
				at, err := d.waitGone(s.watchCtx, &mvccpb.KeyValue{Key: []byte(name), CreateRevision: rev}, rev+1)
				if err == nil {
					s.markLost(name, at)
				}
			}()
		}
		return s, nil
	}
}

// etcdSet is one grant of a set: a key in each queue, created at revision rev.
type etcdSet struct {
	d         *etcdDriver
	names     []string
	rev       int64
	watchCtx  context.Context
	stopWatch context.CancelFunc

	mu       sync.Mutex // held across Unlock's request, so a delete we make is not taken for a loss
	lease    *lease     // nil while unknown (a move to another lease had an unknown outcome)
	released bool
	lost     chan struct{}
	cause    error
}

func (s *etcdSet) Token() uint64 { return uint64(s.rev) }

func (s *etcdSet) Tokens() []uint64 {
	ts := make([]uint64, len(s.names))
	for i := range ts {
		ts[i] = uint64(s.rev)
	}
	return ts
}

func (s *etcdSet) Lost() <-chan struct{} { return s.lost }

func (s *etcdSet) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

func (s *etcdSet) markLost(name string, at int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released || s.cause != nil {
		return
	}
	s.cause = fmt.Errorf("etcd key %s was deleted by revision %d (lease ended or key deleted)", name, at)
	close(s.lost)
}

// owned are the comparisons "every key is still ours".
func (s *etcdSet) owned() []clientv3.Cmp {
	var cmps []clientv3.Cmp
	for _, n := range s.names {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(n), "=", s.rev))
	}
	return cmps
}

// deleteOurs deletes, in one transaction, every key that is still ours, and
// reports whether all of them were.
func (s *etcdSet) deleteOurs(ctx context.Context) (bool, error) {
	var ops []clientv3.Op
	for _, n := range s.names {
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(n), "=", s.rev)},
			[]clientv3.Op{clientv3.OpDelete(n)}, nil))
	}
	resp, err := s.d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("etcd txn: %w", err)
	}
	all := true
	for _, r := range resp.Responses {
		all = all && r.GetResponseTxn().Succeeded
	}
	return all, nil
}

func (s *etcdSet) notHeld() error {
	return fmt.Errorf("%w: a key of the set (create revision %d) is gone", dlock.ErrNotHeld, s.rev)
}

func (s *etcdSet) Refresh(ctx context.Context, ttl time.Duration) error {
	s.mu.Lock()
	cur := s.lease
	s.mu.Unlock()
	if cur != nil && cur.secs == leaseSecs(ttl) {
		resp, err := s.d.cli.Txn(ctx).If(s.owned()...).Commit()
		switch {
		case err != nil:
			return fmt.Errorf("etcd txn: %w", err)
		case !resp.Succeeded:
			_, _ = s.deleteOurs(ctx) // the set is lost: give the other keys back
			return s.notHeld()
		}
		return cur.renew(ctx, s.d.cli)
	}
	nl, err := s.d.leases.get(ctx, ttl)
	if err != nil {
		return err
	}
	var puts []clientv3.Op
	for _, n := range s.names {
		puts = append(puts, clientv3.OpPut(n, "", clientv3.WithLease(nl.id)))
	}
	resp, err := s.d.cli.Txn(ctx).If(s.owned()...).Then(puts...).Commit()
	switch {
	case err != nil:
		s.mu.Lock()
		s.lease = nil
		s.mu.Unlock()
		return fmt.Errorf("etcd txn: %w", err)
	case !resp.Succeeded:
		s.d.leases.put(nl)
		_, _ = s.deleteOurs(ctx)
		return s.notHeld()
	}
	s.mu.Lock()
	s.lease = nl
	s.mu.Unlock()
	if cur != nil {
		s.d.leases.put(cur)
	}
	return nil
}

func (s *etcdSet) Unlock(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return s.notHeld()
	}
	var all bool
	var err error
	for range unlockAttempts {
		all, err = s.deleteOurs(ctx)
		if err == nil || pause(ctx, retryPause) != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	s.released = true
	s.stopWatch()
	if !all {
		return s.notHeld()
	}
	if s.lease != nil {
		s.d.leases.put(s.lease)
	}
	return nil
}
