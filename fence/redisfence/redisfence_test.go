package redisfence_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/redisfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

func client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: servertest.Redis(t).Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// unique returns a resource name of its own for this run (the server is shared).
func unique(name string) string { return name + ":" + fence.NewWriter()[:12] }

// setWrite is the guarded SET of the resource's data key: "data:" and the resource
// (not the resource's name itself: redislock's lock key is the lock's name).
func setWrite(g *redisfence.Guard) fencetest.Write {
	return func(ctx context.Context, resource string, token uint64, writer, value string) error {
		return g.Set(ctx, resource, token, writer, "data:"+resource, value, 0)
	}
}

func get(t *testing.T, c redis.UniversalClient) fencetest.Read {
	return func(ctx context.Context, resource string) string {
		v, err := c.Get(ctx, "data:"+resource).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestLateWrite: on a real redis-server, with redislock's tokens, the stale holder's
// guarded SET is refused and the value is the next holder's.
func TestLateWrite(t *testing.T) {
	c := client(t)
	a, b := redislock.New(client(t)), redislock.New(client(t))
	defer a.Close()
	defer b.Close()
	fencetest.LateWrite(t, a, b, unique("invoices/42"), 200*time.Millisecond, setWrite(redisfence.New(c)), get(t, c))
}

// TestConcurrent: concurrent guarded SETs end with the largest token's value.
func TestConcurrent(t *testing.T) {
	c := client(t)
	fencetest.Concurrent(t, unique("r"), 50, setWrite(redisfence.New(c)), get(t, c))
}

// TestWrites: HSet and Del land only with an accepted token; Set's TTL; a failed
// command moves no fence; tokens compare as numbers over all of uint64.
func TestWrites(t *testing.T) {
	c := client(t)
	g := redisfence.New(c)
	ctx := fencetest.Ctx(t, time.Minute)
	res := unique("inv")
	h, s := res+":h", res+":s"
	if err := g.HSet(ctx, res, 9, "w9", h, "status", "paid", "by", "w9"); err != nil {
		t.Fatal(err)
	}
	if err := g.HSet(ctx, res, 8, "w8", h, "status", "open"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSet with token 8 after 9: %v", err)
	}
	if err := g.Del(ctx, res, 8, "w8", h); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Del with token 8 after 9: %v", err)
	}
	if v, _ := c.HGet(ctx, h, "status").Result(); v != "paid" {
		t.Fatalf("status %q after refused writes", v)
	}
	if err := g.Set(ctx, res, 10, "w10", s, "x", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if ttl := c.PTTL(ctx, s).Val(); ttl <= 0 || ttl > 20*time.Second {
		t.Fatalf("PTTL %v after Set with a TTL of 20s", ttl)
	}
	// A command that fails (HSET on a string) leaves the fence where it was.
	if err := g.HSet(ctx, res, 11, "w11", s, "f", "v"); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSET on a string key: %v, want Redis's WRONGTYPE", err)
	}
	if err := g.Check(ctx, res, 10, "w10"); err != nil {
		t.Fatalf("token 10 after the failed write of 11: %v", err)
	}
	if err := g.Del(ctx, res, 10, "w10", h, s); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, h, s).Val(); n != 0 {
		t.Fatalf("%d keys left after Del", n)
	}
	var stale *fence.StaleError
	if err := g.Check(ctx, res, 10, "other"); !errors.As(err, &stale) || stale.Reason != fence.OtherWriter || stale.Fence != 10 {
		t.Fatalf("token 10 from another writer: %v", err)
	}
	// Numbers, not strings: 10000000000 > 9999999999, and uint64 beyond 2^53.
	big := unique("big")
	for _, tok := range []uint64{9999999999, 10000000000, 1 << 60, 1<<60 + 1, math.MaxUint64} {
		if err := g.Check(ctx, big, tok, "w"); err != nil {
			t.Fatalf("token %d after smaller ones: %v", tok, err)
		}
	}
	if err := g.Check(ctx, big, math.MaxUint64-1, "w"); !errors.As(err, &stale) || stale.Fence != math.MaxUint64 {
		t.Fatalf("token 2^64-2 after 2^64-1: %v", err)
	}
	for _, err := range []error{
		g.Check(ctx, res, 0, "w"), g.HSet(ctx, res, 12, "w", h, "odd"), g.Del(ctx, res, 12, "w"), g.Set(ctx, res, 12, "w", s, "x", -time.Second),
	} {
		if !errors.Is(err, fence.ErrStale) && !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("want a refusal before the script, got %v", err)
		}
	}
}

// TestCluster: on a real Redis Cluster, the fence sits in the resource's slot: a
// write to keys with the resource's hash tag (or its own name) runs, a key in
// another slot is refused by the Cluster, and a resource whose slot no tag names
// is ErrInvalid.
func TestCluster(t *testing.T) {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: servertest.RedisCluster(t, 3).Addrs()})
	t.Cleanup(func() { cl.Close() })
	g := redisfence.New(cl)
	ctx := fencetest.Ctx(t, time.Minute)
	for _, res := range []string{"invoice:{42}", "plain/name", "a{b"} {
		key := res
		if strings.Contains(res, "{42}") {
			key = "lines:{42}"
		}
		if err := g.Set(ctx, res, 2, "w2", key, "v2", 0); err != nil {
			t.Fatalf("%q: %v", res, err)
		}
		if err := g.Set(ctx, res, 1, "w1", key, "v1", 0); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%q: token 1 after 2: %v", res, err)
		}
		if v := cl.Get(ctx, key).Val(); v != "v2" {
			t.Fatalf("%q: %q", key, v)
		}
	}
	if err := g.Set(ctx, "invoice:{42}", 3, "w3", "elsewhere", "v", 0); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a key in another slot: %v, want the Cluster's CROSSSLOT", err)
	}
	for _, res := range []string{"a}b", "{}x"} {
		if err := g.Check(ctx, res, 1, "w"); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("resource %q: %v, want ErrInvalid", res, err)
		}
	}
	c := redislock.New(cl)
	defer c.Close()
	d := redislock.New(cl)
	defer d.Close()
	fencetest.LateWrite(t, c, d, "{inv}/7", 200*time.Millisecond, setWrite(g), get(t, cl))
}

// TestHandlerAcrossServers: two HTTP servers behind fence.Handler share their fences
// through the Redis guard: a token accepted by one makes the other refuse older
// ones (409 Conflict), as the servers of one service behind a load balancer must.
func TestHandlerAcrossServers(t *testing.T) {
	g := redisfence.New(client(t))
	a, b := fencetest.NewHTTPGuard(t, g, nil), fencetest.NewHTTPGuard(t, g, nil)
	ctx := fencetest.Ctx(t, time.Minute)
	res := unique("orders/7")
	if err := a.Put(ctx, res, 5, "w5", "five"); err != nil {
		t.Fatal(err)
	}
	var stale *fence.StaleError
	if err := b.Put(ctx, res, 4, "w4", "four"); !errors.As(err, &stale) || stale.Fence != 5 || stale.Resource != res {
		t.Fatalf("token 4 on the other server after 5 on the first: %v, want the refusal", err)
	}
	if err := b.Put(ctx, res, 5, "w5", "five again"); err != nil {
		t.Fatalf("the same grant on the other server: %v", err)
	}
	if err := a.Put(ctx, res, 5, "w5b", "five from another"); !errors.As(err, &stale) || stale.Reason != fence.OtherWriter {
		t.Fatalf("token 5 from another writer: %v", err)
	}
}
