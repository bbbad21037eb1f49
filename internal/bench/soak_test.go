package bench

import (
	"context"
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
