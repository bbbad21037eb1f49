package redislock_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestMain turns the binary into a lock holder when the fault suite starts it as one,
// stops every server the tests started, and then checks that no goroutine is left.
func TestMain(m *testing.M) {
	conformance.ChildMain()
	code := m.Run()
	closeCluster()
	os.Exit(servertest.Finish(code))
}

const startTimeout = 2 * time.Minute

// need skips t when a server binary is missing (unless DLOCK_REQUIRE_SERVERS=1) and
// fails it on any other error.
func need(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if servers.IsMissing(err) && !servers.RequireServers() {
		t.Skip(err)
	}
	t.Fatal(err)
}

func startCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	t.Cleanup(cancel)
	return ctx
}

// sharedRedis is the process-wide redis-server (no faults allowed on it).
func sharedRedis(t testing.TB) *servers.Redis {
	r, err := servers.SharedRedis(startCtx(t))
	need(t, err)
	return r
}

// privateRedis starts a redis-server for t alone.
func privateRedis(t testing.TB, o servers.RedisOptions) *servers.Redis {
	r, err := servers.StartRedis(startCtx(t), o)
	need(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

var cluster struct {
	sync.Mutex
	c   *servers.RedisCluster
	err error
}

// redisCluster is the 3-master Redis Cluster shared by this package's tests.
func redisCluster(t testing.TB) *servers.RedisCluster {
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c == nil && cluster.err == nil {
		cluster.c, cluster.err = servers.StartRedisCluster(startCtx(t), 3)
	}
	need(t, cluster.err)
	return cluster.c
}

func closeCluster() {
	cluster.Lock()
	defer cluster.Unlock()
	if cluster.c != nil {
		cluster.c.Close()
	}
}

// client returns a go-redis client of addr, closed when t ends.
func client(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient returns a Redis Cluster client, closed when t ends.
func clusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
