package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// maxIdle bounds the idle leases kept per lease TTL, and maxBuckets the TTLs kept;
// extra ones are left to expire.
const (
	maxIdle    = 8
	maxBuckets = 16
)

// cleanupTimeout bounds the requests that tidy up after a failure (revoking a lease
// whose key may have been written).
const cleanupTimeout = 2 * time.Second

// lease is one etcd lease. It carries at most one lock key at a time; between grants
// it waits in the pool.
type lease struct {
	id   clientv3.LeaseID
	secs int64         // the pool bucket: the TTL in seconds it was asked for
	ttl  time.Duration // the TTL the server granted (never below secs)

	mu      sync.Mutex
	renewed time.Time // taken before the request that last set its TTL
}

// leaseSecs is the lease TTL used for a lock TTL: the next whole second, plus one so
// that an idle lease stays usable for a while after it was renewed.
func leaseSecs(ttl time.Duration) int64 { return int64(math.Ceil(ttl.Seconds())) + 1 }

// lastsUntil is the earliest moment, on this process's clock, the server may expire
// the lease: its TTL after the last renewal, less the clock drift allowed for it.
func (ls *lease) lastsUntil() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.renewed.Add(ls.ttl - driver.StandardDrift(ls.ttl))
}

func (ls *lease) setRenewed(t time.Time) {
	ls.mu.Lock()
	if t.After(ls.renewed) {
		ls.renewed = t
	}
	ls.mu.Unlock()
}

// renew resets the lease's TTL; dlock.ErrNotHeld if the server no longer has it.
func (ls *lease) renew(ctx context.Context, cli *clientv3.Client) error {
	t := time.Now()
	if _, err := cli.KeepAliveOnce(ctx, ls.id); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("%w: etcd lease %x has ended", dlock.ErrNotHeld, int64(ls.id))
		}
		return fmt.Errorf("etcd keep-alive of lease %x: %w", int64(ls.id), err)
	}
	ls.setRenewed(t)
	return nil
}

// leasePool holds one Locker's idle leases by TTL.
type leasePool struct {
	cli  *clientv3.Client
	mu   sync.Mutex
	idle map[int64][]*lease
}

// get returns a lease of ttl's bucket that the server keeps for at least ttl from
// now: an idle one (renewed first if needed) or a new grant.
func (p *leasePool) get(ctx context.Context, ttl time.Duration) (*lease, error) {
	secs := leaseSecs(ttl)
	for {
		ls := p.pop(secs)
		if ls == nil {
			break
		}
		now := time.Now()
		if !ls.lastsUntil().Before(now.Add(ttl)) {
			return ls, nil
		}
		if ls.lastsUntil().Before(now) {
			continue // possibly expired: drop it
		}
		if err := ls.renew(ctx, p.cli); err == nil {
			return ls, nil
		} else if ctx.Err() != nil {
			return nil, err
		}
	}
	t := time.Now()
	resp, err := p.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd lease grant: %w", err)
	}
	return &lease{id: resp.ID, secs: secs, ttl: time.Duration(max(resp.TTL, secs)) * time.Second, renewed: t}, nil
}

func (p *leasePool) pop(secs int64) *lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.idle[secs]
	if len(q) == 0 {
		return nil
	}
	ls := q[len(q)-1]
	if len(q) == 1 {
		delete(p.idle, secs)
	} else {
		p.idle[secs] = q[:len(q)-1]
	}
	return ls
}

// put returns a lease that carries no key to the pool. Leases the server may have
// expired are dropped from the pool on the way, and with them the TTL buckets left
// empty, so that the pool shrinks when a TTL is no longer used.
func (p *leasePool) put(ls *lease) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[int64][]*lease{}
	}
	now := time.Now()
	for secs, q := range p.idle {
		q = slices.DeleteFunc(q, func(l *lease) bool { return l.lastsUntil().Before(now) })
		if len(q) == 0 {
			delete(p.idle, secs)
		} else {
			p.idle[secs] = q
		}
	}
	q, ok := p.idle[ls.secs]
	if len(q) < maxIdle && (ok || len(p.idle) < maxBuckets) {
		p.idle[ls.secs] = append(q, ls)
	}
}

// idleBuckets reports how many TTL buckets the pool keeps (for tests).
func (p *leasePool) idleBuckets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// revoke ends a lease that may carry a key we cannot account for (a request whose
// outcome is unknown), taking the key with it. Best effort, bounded.
func (p *leasePool) revoke(ls *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = p.cli.Revoke(ctx, ls.id)
}

// close revokes the idle leases, best effort and bounded.
func (p *leasePool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, q := range idle {
		for _, ls := range q {
			_, _ = p.cli.Revoke(ctx, ls.id)
		}
	}
}
