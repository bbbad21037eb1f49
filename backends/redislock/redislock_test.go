package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/conformance"
)

// harness gives the suite clients of New, each with its own go-redis client (its own
// connections and pub/sub), as separate processes would have.
type harness struct {
	newClient func(t testing.TB) redis.UniversalClient
	opts      []redislock.Option
	admin     redis.UniversalClient // deletes keys behind the holders' backs
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	return redislock.New(h.newClient(t), h.opts...)
}

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.MustDeclare("redis://")
}

func (h *harness) DeleteKey(t testing.TB, key string) { deleteKey(t, h.admin, key) }

// deleteKey deletes the lock key as an operator would; it must have existed.
func deleteKey(t testing.TB, admin redis.UniversalClient, key string) {
	if n, err := admin.Del(ctxFor(t, 10*time.Second), key).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %q: %d, %v (want 1 key deleted)", key, n, err)
	}
}

func singleHarness(t testing.TB, addr string, opts ...redislock.Option) *harness {
	return &harness{
		newClient: func(t testing.TB) redis.UniversalClient { return client(t, addr) },
		opts:      opts,
		admin:     client(t, addr),
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, singleHarness(t, sharedRedis(t).Addr()))
}

func clusterHarness(t testing.TB, opts ...redislock.Option) *harness {
	addrs := redisCluster(t).Addrs()
	admin := clusterClient(t, addrs)
	// Connect to every master now: go-redis starts goroutines per node on first use,
	// which must not happen after the suite's goroutine snapshot.
	if err := admin.ForEachMaster(ctxFor(t, 30*time.Second), func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	return &harness{
		newClient: func(t testing.TB) redis.UniversalClient { return clusterClient(t, addrs) },
		opts:      opts,
		admin:     admin,
	}
}

func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, clusterHarness(t))
}
