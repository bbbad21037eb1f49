package bsmpeer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/peers/bsmpeer"
	"github.com/dlock-go/dlock/peers/internal/peertest"
)

func TestMain(m *testing.M) {
	conformance.ChildMain() // returns at once unless a fault scenario started this process as a holder
	servertest.Main(m)
}

// harness gives the suite clients of the shared Redis, each with its own connections.
type harness struct{ r *servers.Redis }

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	c := redis.NewClient(&redis.Options{Addr: h.r.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return bsmpeer.New(c)
}

// Capabilities: owner-checked release and refresh by a random token, a per-lock TTL,
// no fencing.
func (h harness) Capabilities() conformance.Capabilities {
	return conformance.MustDeclare("peer+bsm://")
}

func (h harness) DeleteKey(t testing.TB, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := h.r.Do(ctx, "DEL", key); err != nil || n != "1" {
		t.Fatalf("DEL %q: %q, %v", key, n, err)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{servertest.Redis(t)})
}

func TestOpen(t *testing.T) {
	peertest.CheckOpen(t, "peer+bsm://"+servertest.Redis(t).Addr())
}

// TestAcquireWithoutDeadlineStopsAfterTTL shows redislock's own rule: Obtain bounds a
// ctx without a deadline to the TTL, so Acquire gives up then, not when ctx ends.
func TestAcquireWithoutDeadlineStopsAfterTTL(t *testing.T) {
	h := harness{servertest.Redis(t)}
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx := context.Background()
	k := t.Name()
	la, err := a.TryAcquire(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	const ttl = 300 * time.Millisecond
	t0 := time.Now()
	_, err = b.Acquire(ctx, k, dlock.WithTTL(ttl))
	took := time.Since(t0)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key without a ctx deadline: want ErrNotAcquired after the ttl, got %v", err)
	}
	if took < ttl || took > ttl+5*time.Second {
		t.Fatalf("gave up after %v, want about the ttl %v", took, ttl)
	}
	t.Logf("gave up after %v (ttl %v): %v", took.Round(time.Millisecond), ttl, err)
}
