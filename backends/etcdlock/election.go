package etcdlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Leader election (dlock.NewElection) is the queue of the mutex with the leader's
// value in each candidate's key, under an election prefix of its own:
// ElectionName(prefix, name) + "/" + <lease ID in hex>. The candidate whose key has
// the lowest create revision leads; its create revision is the term's token. This is
// the layout of etcd's own concurrency.Election (and `etcdctl elect`) on the prefix
// ElectionName(prefix, name): a dlock candidate and an etcd one campaign in one
// election, and each side sees the other's leader and value.

var (
	_ driver.Elector        = (*etcdDriver)(nil)
	_ driver.CampaignWaiter = (*etcdDriver)(nil)
)

// ElectionName is the election prefix etcd's concurrency.NewElection (or `etcdctl
// elect`) takes to campaign in dlock's election name under prefix. The ';' never
// appears in an escaped key, so no mutex's queue (prefix + "/" + escaped key + "/")
// lies inside an election's, nor the other way round.
func ElectionName(prefix, name string) string {
	return strings.TrimRight(prefix, "/") + "/" + electionsDir + "/" + url.PathEscape(name)
}

// electionsDir is the path segment under the prefix that holds every election's
// queue.
const electionsDir = ";election"

func (d *etcdDriver) electionQueue(name string) string { return ElectionName(d.prefix, name) + "/" }

// TryCampaign leads if no candidate queues.
func (d *etcdDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	return d.tryIn(ctx, name, d.electionQueue(name), value, ttl)
}

// Campaign queues and waits until every candidate before it is gone.
func (d *etcdDriver) Campaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	return d.enqueue(ctx, name, d.electionQueue(name), value, ttl, true, mutexRule)
}

func (d *etcdDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	resp, err := d.cli.Get(ctx, d.electionQueue(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return driver.Leader{}, fmt.Errorf("etcd get %s: %w", d.electionQueue(name), err)
	}
	if len(resp.Kvs) == 0 {
		return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
	}
	kv := resp.Kvs[0]
	return driver.Leader{Value: string(kv.Value), Token: uint64(kv.CreateRevision)}, nil
}

// WatchLeaders replays the election's queue revision by revision from a read of
// it: every candidate that was first in the queue at some revision is reported,
// however briefly it led.
func (d *etcdDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	queue := d.electionQueue(name)
	resp, err := d.cli.Get(ctx, queue, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("etcd get %s: %w", queue, err)
	}
	live := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		live[string(kv.Key)] = kv
	}
	report := func() {
		var first *mvccpb.KeyValue
		for _, kv := range live {
			if first == nil || kv.CreateRevision < first.CreateRevision {
				first = kv
			}
		}
		if first != nil && uint64(first.CreateRevision) > after {
			after = uint64(first.CreateRevision)
			found(driver.Leader{Value: string(first.Value), Token: after})
		}
	}
	report()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range d.cli.Watch(wctx, queue, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("etcd watch %s: %w", queue, err)
		}
		for i, ev := range wr.Events {
			switch ev.Type {
			case mvccpb.PUT:
				live[string(ev.Kv.Key)] = ev.Kv
			case mvccpb.DELETE:
				delete(live, string(ev.Kv.Key))
			}
			// One look per revision: a leader of a single revision counts too.
			if i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != ev.Kv.ModRevision {
				report()
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("etcd watch %s ended", queue)
}
