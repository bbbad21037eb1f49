package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
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

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// harness gives the suite clients of New, each with its own go-redis client (its own
// connections and pub/sub), as separate processes would have: made by newClient, or
// opened from url.
type harness struct {
	name      string
	fifo      bool // WithFIFO(true); the harness counts the store's queue
	newClient func(t testing.TB) redis.UniversalClient
	url       string // when set, NewLocker opens it (fifo=true in it for the fair mode)
	opts      []redislock.Option
	admin     redis.UniversalClient // deletes keys behind the holders' backs
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	if h.url != "" {
		return servertest.Open(t, h.url)
	}
	return redislock.New(h.newClient(t), h.opts...)
}

func (h *harness) Capabilities() spec.Capabilities {
	switch {
	case h.url != "":
		return conformance.MustDeclare(h.url)
	case h.fifo:
		return conformance.MustDeclare("redis://127.0.0.1:6379?fifo=true")
	}
	return conformance.MustDeclare("redis://127.0.0.1:6379")
}

// Waiting counts the waiters in key's queue (the fair mode's).
func (h *harness) Waiting(t testing.TB, key string) int { return waiting(t, h.admin, key) }

// waiting counts the waiters in key's queue.
func waiting(t testing.TB, c redis.UniversalClient, key string) int {
	n, err := c.ZCard(ctxFor(t, 10*time.Second), redislock.QueueKey(key)).Result()
	if err != nil {
		t.Fatalf("ZCARD of %q's queue: %v", key, err)
	}
	return int(n)
}

func (h *harness) Name() string { return h.name }

func (h *harness) DeleteKey(t testing.TB, key string) { deleteKey(t, h.admin, key) }

// deleteKey deletes the lock key as an operator would; it must have existed.
func deleteKey(t testing.TB, admin redis.UniversalClient, key string) {
	if n, err := admin.Del(ctxFor(t, 10*time.Second), key).Result(); err != nil || n != 1 {
		t.Fatalf("DEL %q: %d, %v (want 1 key deleted)", key, n, err)
	}
}

func singleHarness(t testing.TB, addr string, opts ...redislock.Option) *harness {
	return &harness{
		name:      "redis",
		newClient: func(t testing.TB) redis.UniversalClient { return client(t, addr) },
		opts:      opts,
		admin:     client(t, addr),
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, singleHarness(t, sharedRedis(t).Addr()))
}

// TestConformanceFIFO runs the suite on the fair mode (WithFIFO), on one server and
// on a Redis Cluster (the queue sits in the lock key's hash slot).
func TestConformanceFIFO(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		h := singleHarness(t, sharedRedis(t).Addr(), redislock.WithFIFO(true))
		h.name, h.fifo = "redis (fifo)", true
		conformance.Run(t, h)
	})
	t.Run("cluster", func(t *testing.T) {
		h := clusterHarness(t, redislock.WithFIFO(true))
		h.name, h.fifo = "redis (cluster, fifo)", true
		conformance.Run(t, h)
	})
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
		name:      "redis (cluster)",
		newClient: func(t testing.TB) redis.UniversalClient { return clusterClient(t, addrs) },
		opts:      opts,
		admin:     admin,
	}
}

func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, clusterHarness(t))
}

// secretPassword is the lock user's password in the TLS and ACL tests: no message
// may show it.
const secretPassword = "S3CRET-redis-pw"

// secureRedis starts a Redis that speaks TLS only and wants client certificates,
// whose default user has a password, with an ACL user "locker"
// (redisops.LockUserACL, password secretPassword). It returns the server, its PKI and the rediss:// URL
// of the lock user (verifying the server as "localhost", by the PKI's CA).
func secureRedis(t testing.TB) (*servers.Redis, *servers.PKI, string) {
	pki := servertest.PKI(t)
	r := servertest.SecureRedis(t, pki, "adm1n-pw", "locker", secretPassword, redisops.LockUserACL)
	u := fmt.Sprintf("rediss://locker:%s@%s?%s", secretPassword, r.Addr(), pki.URLQuery())
	return r, pki, u
}

// adminClient is a client of r as its administrator (TLS, the default user).
func adminClient(t testing.TB, r *servers.Redis, pki *servers.PKI) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), Password: "adm1n-pw", TLSConfig: pki.ClientTLS()})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformanceTLS runs the suite on Lockers opened from a rediss:// URL with a
// CA, a client certificate and key, a server name and an ACL user of least
// privilege, against a server that requires all of them; the fair mode too
// (fifo=true: its script's commands and queue keys are in the same ACL).
func TestConformanceTLS(t *testing.T) {
	r, pki, u := secureRedis(t)
	t.Run("default", func(t *testing.T) {
		conformance.Run(t, &harness{name: "redis (TLS, ACL user)", url: u, admin: adminClient(t, r, pki)})
	})
	t.Run("fifo", func(t *testing.T) {
		conformance.Run(t, &harness{name: "redis (TLS, ACL user, fifo)", url: u + "&fifo=true", admin: adminClient(t, r, pki)})
	})
}

// TestConformanceSentinel runs the suite on Lockers opened from a URL that names
// three Sentinels and the master they watch (one replica).
func TestConformanceSentinel(t *testing.T) {
	g := servertest.RedisSentinelGroup(t, 1, 3)
	u := "redis://" + strings.Join(g.SentinelAddrs(), ",") + "?sentinel_master=" + g.MasterName
	conformance.Run(t, &harness{name: "redis (sentinel)", url: u, admin: client(t, g.Master.Addr())})
}

// setnxHarness gives the suite clients of NewSETNX(variant).
type setnxHarness struct {
	addr    string
	variant redislock.Variant
	admin   *redis.Client
}

func newSETNXHarness(t testing.TB, v redislock.Variant) *setnxHarness {
	addr := sharedRedis(t).Addr()
	return &setnxHarness{addr: addr, variant: v, admin: client(t, addr)}
}

func (h *setnxHarness) NewLocker(t testing.TB) dlock.Locker {
	return redislock.NewSETNX(client(t, h.addr), h.variant)
}

// weaknesses says what each variant gets wrong (see redislock.Variant).

func (h *setnxHarness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare("redis+setnx://" + h.addr + "?variant=" + url.QueryEscape(string(h.variant)))
}

func (h *setnxHarness) Name() string {
	return "redis+setnx " + strings.TrimPrefix(string(h.variant), "setnx+")
}

func (h *setnxHarness) DeleteKey(t testing.TB, key string) { deleteKey(t, h.admin, key) }

// ReproduceWeakness runs the fault each variant's weakness needs: a holder that dies
// between SETNX and EXPIRE, or a client whose clock runs ahead.
func (h *setnxHarness) ReproduceWeakness(t *testing.T, p spec.Property) ([]string, bool) {
	switch {
	case h.variant == redislock.SETNXExpire && p == spec.DeadlockFreedom:
		return h.crashBetweenSETNXAndExpire(t), true
	case h.variant == redislock.SETNXGetSet && p == spec.MutualExclusion:
		return h.clockAheadTakesOver(t), true
	}
	return nil, false
}

// errCrashed is what every command of a crashed client returns.
var errCrashed = errors.New("test: the client process died here")

// crashAfterSETNX is a go-redis hook that lets commands through until a SETNX
// succeeds and then fails every later command without sending it: from the server's
// side, the client died right after SETNX.
type crashAfterSETNX struct{ dead atomic.Bool }

func (c *crashAfterSETNX) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *crashAfterSETNX) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.dead.Load() {
			return errCrashed
		}
		return next(ctx, cmds)
	}
}
func (c *crashAfterSETNX) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.dead.Load() {
			cmd.SetErr(errCrashed)
			return errCrashed
		}
		err := next(ctx, cmd)
		if r, ok := cmd.(*redis.Cmd); ok && strings.EqualFold(cmd.Name(), "setnx") {
			if set, _ := r.Bool(); set {
				c.dead.Store(true)
			}
		}
		return err
	}
}

func (h *setnxHarness) crashBetweenSETNXAndExpire(t *testing.T) []string {
	k := fmt.Sprintf("setnx-crash/%d", time.Now().UnixNano())
	ttl := 300 * time.Millisecond
	dying := client(t, h.addr)
	dying.AddHook(&crashAfterSETNX{})
	a := conformance.Recorded(t, redislock.NewSETNX(dying, redislock.SETNXExpire), "crashing-holder")
	defer a.Close()
	if _, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl)); !errors.Is(err, errCrashed) {
		t.Fatalf("the crashing holder's TryAcquire: want the crash between SETNX and EXPIRE, got %v", err)
	}
	t.Cleanup(func() { h.admin.Del(context.Background(), k) })
	b := conformance.Recorded(t, redislock.NewSETNX(client(t, h.addr), redislock.SETNXExpire), "next")
	defer b.Close()
	wait := 10 * ttl
	_, err := b.Acquire(ctxFor(t, wait), k, dlock.WithTTL(ttl))
	if err == nil {
		return nil
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire after the crash: %v", err)
	}
	pttl, err := h.admin.PTTL(ctxFor(t, 10*time.Second), k).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl != -1 { // go-redis reports PTTL -1 (no expiry) as -1ns
		t.Fatalf("PTTL %q after the crash: %v, want -1 (no expiry)", k, pttl)
	}
	return []string{fmt.Sprintf("a holder that died between SETNX and EXPIRE (ttl %v) still holds %q %v later, with no expiry: never freed",
		ttl, k, wait)}
}

func (h *setnxHarness) clockAheadTakesOver(t *testing.T) []string {
	k := fmt.Sprintf("setnx-clock/%d", time.Now().UnixNano())
	const skew = time.Minute
	ttl := 30 * time.Second
	// Both clients are recorded: the suite's checker sees the overlap in the history.
	a := conformance.Recorded(t, redislock.NewSETNX(client(t, h.addr), redislock.SETNXGetSet), "holder")
	defer a.Close()
	ahead := conformance.Recorded(t, redislock.NewSETNXWithClock(client(t, h.addr), redislock.SETNXGetSet,
		func() time.Time { return time.Now().Add(skew) }), "client-ahead")
	defer ahead.Close()
	res := conformance.NewResource(false)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	res.Enter("holder", la.Token())
	lb, err := ahead.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
	case err != nil:
		t.Fatal(err)
	default:
		res.Enter("client-ahead", lb.Token())
		res.Leave("client-ahead")
		_ = lb.Release(ctxFor(t, 10*time.Second))
	}
	res.Leave("holder")
	_ = la.Release(ctxFor(t, 10*time.Second))
	var out []string
	for _, o := range res.Overlaps() {
		out = append(out, fmt.Sprintf("a client whose clock runs %v ahead took over a lock held for %v: %s", skew, ttl, o))
	}
	return out
}

// TestConformanceSETNX runs the suite on both classic variants. Each declares its
// weaknesses: OwnerOnlyRelease (a stale holder's DEL frees its successor's lock,
// shown by the generic check) and the one it needs a fault for (ReproduceWeakness:
// the crash between SETNX and EXPIRE, or a client whose clock runs ahead), which
// the generic check must not show without the fault.
func TestConformanceSETNX(t *testing.T) {
	for _, v := range []redislock.Variant{redislock.SETNXExpire, redislock.SETNXGetSet} {
		t.Run(string(v), func(t *testing.T) {
			conformance.Run(t, newSETNXHarness(t, v))
		})
	}
}
