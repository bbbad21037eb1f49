package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// leakyLocker leaks a goroutine on every grant: what the soak is there to catch.
type leakyLocker struct {
	dlock.Locker
	stop chan struct{}
}

func (l leakyLocker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	ls, err := l.Locker.Acquire(ctx, key, opts...)
	if err == nil {
		go func() { <-l.stop }()
	}
	return ls, err
}

// TestSoak: the soak of the in-memory backend sees no overlap and stays flat; the
// same backend leaking a goroutine per grant is reported not flat.
func TestSoak(t *testing.T) {
	cfg := SoakConfig{Duration: 2 * time.Second, Clients: 8, Keys: 50, TTL: 5 * time.Second, Window: 400 * time.Millisecond}
	ep := Endpoints{Run: runID(), Mem: memlock.NewStore()}
	mem := Target{Name: "mem", Open: func(ctx context.Context, ep Endpoints, ttl time.Duration) (dlock.Locker, error) {
		return memlock.New(memlock.WithStore(ep.Mem)), nil
	}}
	row, err := soakOne(context.Background(), ep, mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if row.Grants == 0 || row.Violations != 0 || row.Stale != 0 || row.Errors != 0 || !row.Flat {
		t.Errorf("mem: %+v; want grants, no overlap, no stale token, no error, flat", row)
	}

	stop := make(chan struct{})
	defer close(stop)
	leaky := mem
	leaky.Open = func(ctx context.Context, ep Endpoints, ttl time.Duration) (dlock.Locker, error) {
		return leakyLocker{memlock.New(memlock.WithStore(ep.Mem)), stop}, nil
	}
	row, err = soakOne(context.Background(), ep, leaky, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if row.Flat {
		t.Errorf("a Locker that leaks a goroutine per grant: %+v; want not flat", row)
	}
}

// keyLeaker leaves a lock behind on every grant, one that never expires: state
// the store keeps for ever. n counts the locks left behind: a leak tried with a
// ctx that ended meanwhile (the grant came as the run ended) leaves none.
type keyLeaker struct {
	dlock.Locker
	n *atomic.Int64
}

// leakSeq names the leaked locks.
var leakSeq atomic.Int64

func (l keyLeaker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	ls, err := l.Locker.Acquire(ctx, key, opts...)
	if err == nil {
		if _, lerr := l.Locker.TryAcquire(ctx, fmt.Sprint("leak/", leakSeq.Add(1)), dlock.WithTTL(dlock.MaxTTL)); lerr == nil {
			l.n.Add(1)
		}
	}
	return ls, err
}

// TestSoakStoreKeys: the soak counts the keys the in-process store keeps before and
// after the run: none stay after elections (campaigns, resignations, observers of
// names nobody campaigns in), and a Locker that leaves a lock behind per grant is
// reported not flat.
func TestSoakStoreKeys(t *testing.T) {
	cfg := SoakConfig{Duration: 2 * time.Second, Clients: 8, Keys: 50, TTL: time.Second, Window: 400 * time.Millisecond, Elections: true}
	ep := Endpoints{Run: runID(), Mem: memlock.NewStore()}
	mem := Target{Name: "mem", Store: Memory, Open: func(ctx context.Context, ep Endpoints, ttl time.Duration) (dlock.Locker, error) {
		return memlock.New(memlock.WithStore(ep.Mem)), nil
	}}
	row, err := soakOne(context.Background(), ep, mem, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if row.Grants == 0 || row.Violations != 0 || row.Stale != 0 || row.Errors != 0 || !row.Flat || row.StoreKeys != [2]int64{0, 0} {
		t.Errorf("mem elections: %+v; want grants, no overlap, no stale token, no error, flat, no store key before or after", row)
	}
	cfg.Elections = false
	leaky := mem
	var n atomic.Int64
	leaky.Open = func(ctx context.Context, ep Endpoints, ttl time.Duration) (dlock.Locker, error) {
		return keyLeaker{memlock.New(memlock.WithStore(ep.Mem)), &n}, nil
	}
	row, err = soakOne(context.Background(), ep, leaky, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if row.Flat || row.StoreKeys[1] < n.Load() {
		t.Errorf("a Locker that leaves a lock per grant (%d left): %+v; want not flat, the store's keys counted", n.Load(), row)
	}
}
