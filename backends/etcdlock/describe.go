package etcdlock

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List). A name's three queues — its mutex's, its
// semaphore's or read-write lock's, its election's — are read in one transaction,
// so one revision of the store; then each lease that carries a key is asked its
// time left (one LeaseTimeToLive each). What the store keeps: every contender's key
// in queue order (the holder first, then the waiters: Queue is true), its create
// revision (the token, shown for the holders), the lease that carries it (the
// Owner), that lease's time left; a mutex's key holds the Holder record its client
// wrote with dlock.WithHolder (driver.AppendHolder on an empty value), and Since
// comes from that record (the holder's clock: etcd keeps no time of creation). A
// semaphore's key holds its limit, a read-write lock's key its mode, an election
// candidate's key its value: they keep no record (their readers, in other versions
// of dlock and in etcd's own concurrency.Election, compare those values whole).
// List ranges over the escaped names under the prefix, in one transaction too.

var _ driver.Describer = (*etcdDriver)(nil)

// queueKind is which of a name's queues a key lies in.
type queueKind int

const (
	inMutex queueKind = iota
	inPrimitive
	inElection
)

// queued is one queue of one name, its keys in create-revision order.
type queued struct {
	name string
	in   queueKind
	kvs  []*mvccpb.KeyValue
}

func (d *etcdDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	queues := []string{d.queue(key), PrimitiveQueue(d.prefix, key), d.electionQueue(key)}
	var ops []clientv3.Op
	for _, q := range queues {
		ops = append(ops, clientv3.OpGet(q, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)))
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd txn reading %s: %w", queues[0], err)
	}
	var qs []*queued
	for i, r := range resp.Responses {
		if kvs := contenders(queues[i], r.GetResponseRange().Kvs); len(kvs) > 0 { // not a nested prefix's keys
			qs = append(qs, &queued{name: key, in: queueKind(i), kvs: kvs})
		}
	}
	return d.states(ctx, qs)
}

func (d *etcdDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	root := d.prefix + "/"
	ranges := []string{root}
	if prefix != "" {
		// The escape of a name begins with the escape of prefix exactly when the name
		// begins with prefix (url.PathEscape escapes byte by byte).
		esc := url.PathEscape(prefix)
		ranges = []string{root + esc, root + primitivesDir + "/" + esc, ElectionName(d.prefix, prefix)}
	}
	var ops []clientv3.Op
	for _, r := range ranges {
		ops = append(ops, clientv3.OpGet(r, clientv3.WithPrefix()))
	}
	resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("etcd txn reading %s: %w", root, err)
	}
	type id struct {
		name string
		in   queueKind
	}
	found := map[id]*queued{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			name, in, ok := d.nameOf(string(kv.Key))
			if !ok || !strings.HasPrefix(name, prefix) {
				continue
			}
			q := found[id{name, in}]
			if q == nil {
				q = &queued{name: name, in: in}
				found[id{name, in}] = q
			}
			q.kvs = append(q.kvs, kv)
		}
	}
	qs := slices.Collect(maps.Values(found))
	for _, q := range qs {
		slices.SortFunc(q.kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	}
	slices.SortFunc(qs, func(a, b *queued) int { return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.in, b.in)) })
	return d.states(ctx, qs)
}

// nameOf returns the name whose queue holds the etcd key k (under the prefix), and
// which of its queues; ok is false for a key in no queue.
func (d *etcdDriver) nameOf(k string) (name string, in queueKind, ok bool) {
	rest, ok := strings.CutPrefix(k, d.prefix+"/")
	if !ok {
		return "", 0, false
	}
	in = inMutex
	if r, ok := strings.CutPrefix(rest, primitivesDir+"/"); ok {
		rest, in = r, inPrimitive
	} else if r, ok := strings.CutPrefix(rest, ";election/"); ok {
		rest, in = r, inElection
	}
	seg, own, ok := strings.Cut(rest, "/")
	if !ok || seg == "" || strings.Contains(own, "/") { // a nested prefix's key (contenders)
		return "", 0, false
	}
	name, err := url.PathUnescape(seg)
	if err != nil {
		return "", 0, false
	}
	return name, in, true
}

// states describes the queues qs, asking each lease that carries one of their keys
// for its time left.
func (d *etcdDriver) states(ctx context.Context, qs []*queued) ([]driver.KeyState, error) {
	ttls := map[int64]time.Duration{}
	for _, q := range qs {
		for _, kv := range q.kvs {
			if _, ok := ttls[kv.Lease]; ok || kv.Lease == 0 {
				continue
			}
			r, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return nil, fmt.Errorf("etcd lease time-to-live of %x: %w", kv.Lease, err)
			}
			ttls[kv.Lease] = max(time.Duration(r.TTL)*time.Second, 0)
		}
	}
	var out []driver.KeyState
	for _, q := range qs {
		out = append(out, q.state(ttls))
	}
	return out, nil
}

// state is what queue q holds: its keys before as many as its rule grants are
// holders, the others wait.
func (q *queued) state(ttls map[int64]time.Duration) driver.KeyState {
	s := driver.KeyState{Key: q.name, Kind: driver.KindLock, Queue: true}
	entry := func(kv *mvccpb.KeyValue, holds bool) driver.Entry {
		e := driver.Entry{Owner: fmt.Sprintf("lease %x", kv.Lease), TTL: ttls[kv.Lease]}
		if kv.Lease == 0 {
			e.Owner = "key " + string(kv.Key) + " (no lease)"
		}
		if holds {
			e.Token = uint64(kv.CreateRevision)
		}
		return e
	}
	add := func(e driver.Entry, holds bool) {
		if holds {
			s.Holders = append(s.Holders, e)
		} else {
			s.Waiters = append(s.Waiters, e)
		}
	}
	switch q.in {
	case inMutex:
		for i, kv := range q.kvs {
			e := entry(kv, i == 0)
			if _, h := driver.CutHolder(string(kv.Value)); h != nil {
				e.Holder, e.Since = h, h.Since
			}
			add(e, i == 0)
		}
	case inElection:
		s.Kind = driver.KindElection
		for i, kv := range q.kvs {
			e := entry(kv, i == 0)
			e.Value = string(kv.Value)
			add(e, i == 0)
		}
	case inPrimitive:
		kind, setting, _ := strings.Cut(string(q.kvs[0].Value), "/")
		if kind == kindSemaphore {
			s.Kind = driver.KindSemaphore
			s.Limit, _ = strconv.Atoi(setting)
		} else {
			s.Kind = driver.KindRWLock
		}
		writer := false // an exclusive key came before
		for i, kv := range q.kvs {
			var holds bool
			if s.Kind == driver.KindSemaphore {
				holds = i < s.Limit
			} else {
				exclusive := string(kv.Value) != kindRW+"/"+modeShared
				holds = !writer && (!exclusive || i == 0)
				writer = writer || exclusive
			}
			e := entry(kv, holds)
			e.Shared = s.Kind == driver.KindRWLock && string(kv.Value) == kindRW+"/"+modeShared
			add(e, holds)
		}
	}
	return s
}
