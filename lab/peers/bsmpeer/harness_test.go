package bsmpeer_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/bsmpeer"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { peertest.Main(m) }

// harness gives the suite clients of the shared Redis, each with its own connections.
type harness struct{ r *servers.Redis }

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	c := redis.NewClient(&redis.Options{Addr: h.r.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return bsmpeer.New(c)
}

// Capabilities: owner-checked release and refresh by a random token, a per-lock TTL,
// no fencing.
func (h harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare("peer+bsm://" + h.r.Addr())
}

func (h harness) Name() string { return "peer+bsm" }

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

// TestAcquireWithoutDeadlineStopsAfterTTL shows redislock's own rule: Obtain bounds a

// ctx without a deadline to the TTL, so Acquire gives up then, not when ctx ends.
