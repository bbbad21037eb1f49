package servers_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

var keySeq atomic.Int64

func key(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), keySeq.Add(1))
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func redisClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func mustSet(t testing.TB, c *redis.Client, k, v string, ttl time.Duration) {
	t.Helper()
	if err := c.Set(ctxT(t, 5*time.Second), k, v, ttl).Err(); err != nil {
		t.Fatalf("SET %s: %v", k, err)
	}
}

// getOrNil returns the value, "" with ok=false for a missing key, and fails
// the test on any other error.
func getOrNil(t testing.TB, c *redis.Client, k string) (string, bool) {
	t.Helper()
	v, err := c.Get(ctxT(t, 5*time.Second), k).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", k, err)
	}
	return v, true
}

func wantValue(t testing.TB, c *redis.Client, k, want string) {
	t.Helper()
	got, ok := getOrNil(t, c, k)
	if !ok || got != want {
		t.Fatalf("GET %s = %q (exists %v), want %q", k, got, ok, want)
	}
}

func wantMissing(t testing.TB, c *redis.Client, k string) {
	t.Helper()
	if got, ok := getOrNil(t, c, k); ok {
		t.Fatalf("GET %s = %q, want no key", k, got)
	}
}

// TestStartAllInParallel starts one private server of every kind at once and
// checks the whole start-up stays fast.
func TestStartAllInParallel(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	t0 := time.Now()
	times := map[string]time.Duration{}
	type res struct {
		name string
		d    time.Duration
		c    interface{ Close() error }
		err  error
	}
	ch := make(chan res)
	run := func(name string, f func() (interface{ Close() error }, error)) {
		go func() {
			s := time.Now()
			c, err := f()
			ch <- res{name, time.Since(s), c, err}
		}()
	}
	run("redis", func() (interface{ Close() error }, error) { return servers.StartRedis(ctx, servers.RedisOptions{}) })
	run("mysql", func() (interface{ Close() error }, error) { return servers.StartMySQL(ctx) })
	run("zookeeper", func() (interface{ Close() error }, error) { return servers.StartZooKeeper(ctx) })
	run("etcd", func() (interface{ Close() error }, error) { return servers.StartEtcd(ctx) })
	var errs []error
	for range 4 {
		r := <-ch
		if r.err == nil {
			t.Cleanup(func() { r.c.Close() })
		} else if servers.IsMissing(r.err) && !servers.RequireServers() {
			t.Logf("%s: %v", r.name, r.err)
			continue
		}
		errs = append(errs, r.err)
		times[r.name] = r.d
	}
	total := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("parallel start-up: total %v; %v", total.Round(time.Millisecond), times)
	if total > 10*time.Second {
		t.Errorf("starting one server of each kind in parallel took %v, want < 10s", total)
	}
}

func TestSharedRedis(t *testing.T) {
	r := servertest.Redis(t)
	if r2 := servertest.Redis(t); r2 != r {
		t.Fatalf("shared Redis started twice: %s, %s", r.Addr(), r2.Addr())
	}
	c := redisClient(t, r.Addr())
	k := key(t)
	mustSet(t, c, k, "v", 0)
	wantValue(t, c, k, "v")
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	cases := []struct {
		aof      string
		keepData bool
		kept     bool
	}{
		{aof: "always", keepData: true, kept: true},
		{aof: "always", keepData: false, kept: false},
		{aof: "", keepData: true, kept: false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("aof=%q/keep=%v", tc.aof, tc.keepData), func(t *testing.T) {
			t.Parallel()
			r := servertest.NewRedis(t, servers.RedisOptions{AOF: tc.aof})
			addr := r.Addr()
			c := redisClient(t, addr)
			k := key(t)
			mustSet(t, c, k, "v", 0)
			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := c.Ping(ctxT(t, 2*time.Second)).Err(); err == nil {
				t.Fatal("PING answered after Kill")
			}
			t0 := time.Now()
			if err := r.Restart(ctxT(t, 30*time.Second), tc.keepData); err != nil {
				t.Fatal(err)
			}
			t.Logf("redis restart in %v", time.Since(t0).Round(time.Millisecond))
			if r.Addr() != addr {
				t.Fatalf("restarted on %s, want %s", r.Addr(), addr)
			}
			if tc.kept {
				wantValue(t, c, k, "v")
			} else {
				wantMissing(t, c, k)
			}
		})
	}
}

func TestRedisStopRestart(t *testing.T) {
	t.Parallel()
	r := servertest.NewRedis(t, servers.RedisOptions{AOF: "everysec"})
	c := redisClient(t, r.Addr())
	k := key(t)
	mustSet(t, c, k, "v", 0)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	// A graceful stop flushes the AOF even with everysec.
	if err := r.Restart(ctxT(t, 30*time.Second), true); err != nil {
		t.Fatal(err)
	}
	wantValue(t, c, k, "v")
	// Close is idempotent.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	r := servertest.NewRedis(t, servers.RedisOptions{})
	c := redisClient(t, r.Addr())
	k := key(t)
	mustSet(t, c, k, "v", 0)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c.Get(ctx, k).Err()
	cancel()
	if err == nil {
		t.Fatal("GET answered while paused")
	}
	if !isTimeout(err) {
		t.Fatalf("GET while paused: %v, want a time-out", err)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	wantValue(t, c, k, "v")
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}

func TestRedisMasters(t *testing.T) {
	t.Parallel()
	rs := servertest.RedisMasters(t, 5)
	if len(rs) != 5 {
		t.Fatalf("%d masters", len(rs))
	}
	seen := map[string]bool{}
	k := key(t)
	for i, r := range rs {
		if seen[r.Addr()] {
			t.Fatalf("duplicate address %s", r.Addr())
		}
		seen[r.Addr()] = true
		c := redisClient(t, r.Addr())
		mustSet(t, c, k, fmt.Sprint(i), 0)
	}
	// Independent: each keeps its own value.
	for i, r := range rs {
		wantValue(t, redisClient(t, r.Addr()), k, fmt.Sprint(i))
	}
}

func TestRedisReplicaPair(t *testing.T) {
	t.Parallel()
	m, r := servertest.RedisReplicaPair(t)
	mc, rc := redisClient(t, m.Addr()), redisClient(t, r.Addr())
	ctx := ctxT(t, 30*time.Second)

	k1 := key(t)
	mustSet(t, mc, k1, "1", 0)
	if err := r.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, rc, k1, "1")
	if err := rc.Set(ctx, key(t), "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("SET on replica: %v, want READONLY", err)
	}

	// Paused replication: the master takes writes the replica never sees.
	if err := r.PauseReplication(); err != nil {
		t.Fatal(err)
	}
	k2 := key(t)
	mustSet(t, mc, k2, "2", 0)
	// WAIT returns how many replicas acknowledged: none while paused.
	n, err := mc.Wait(ctx, 1, 300*time.Millisecond).Result()
	if err != nil || n != 0 {
		t.Fatalf("WAIT while paused = %d, %v; want 0 replicas", n, err)
	}
	wantMissing(t, rc, k2)

	if err := r.ResumeReplication(ctx); err != nil {
		t.Fatal(err)
	}
	wantValue(t, rc, k2, "2")

	// Pause again, write, promote: the promoted replica lacks the write.
	if err := r.PauseReplication(); err != nil {
		t.Fatal(err)
	}
	k3 := key(t)
	mustSet(t, mc, k3, "3", 0)
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, rc, k3)
	mustSet(t, rc, k3, "promoted", 0)
	wantValue(t, rc, k3, "promoted")
	wantValue(t, mc, k3, "3")
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := servertest.RedisCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 30*time.Second)
	// Keys over many slots land on every node.
	for i := 0; i < 50; i++ {
		k := fmt.Sprintf("%s-%d", key(t), i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := c.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s = %d, %v", k, v, err)
		}
	}
	for _, n := range cl.Nodes {
		size, err := redisClient(t, n.Addr()).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if size == 0 {
			t.Errorf("node %s holds no key: slots not spread", n.Addr())
		}
	}
	// A node restarted without its data keeps its cluster identity (nodes.conf)
	// and the cluster comes back to ok, minus that node's keys.
	n0 := cl.Nodes[0]
	if err := n0.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n0.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitOK(ctx); err != nil {
		t.Fatal(err)
	}
	if size, err := redisClient(t, n0.Addr()).DBSize(ctx).Result(); err != nil || size != 0 {
		t.Fatalf("wiped node: DBSIZE %d, %v; want 0", size, err)
	}
	k := key(t)
	if err := c.Set(ctx, k, "after", 0).Err(); err != nil {
		t.Fatalf("SET after node restart: %v", err)
	}
}

func TestRedisShiftedClock(t *testing.T) {
	t.Parallel()
	r := servertest.NewRedis(t, servers.RedisOptions{FakeTimeOffset: "+30s"})
	ctx := ctxT(t, 30*time.Second)
	off, err := r.ClockOffset(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if off < 29*time.Second || off > 31*time.Second {
		t.Fatalf("clock offset %v, want ~30s", off)
	}
	c := redisClient(t, r.Addr())
	k := key(t)
	mustSet(t, c, k, "v", 10*time.Second)
	wantValue(t, c, k, "v")
	t0 := time.Now()
	if err := r.ShiftClock(ctx, "+90s"); err != nil { // a 60s jump forward
		t.Fatal(err)
	}
	t.Logf("clock jump visible after %v", time.Since(t0).Round(time.Millisecond))
	wantMissing(t, c, k)
	if off, err = r.ClockOffset(ctx); err != nil || off < 89*time.Second || off > 91*time.Second {
		t.Fatalf("clock offset %v, %v; want ~90s", off, err)
	}
}

func TestShiftClockNeedsFakeTime(t *testing.T) {
	t.Parallel()
	r := servertest.NewRedis(t, servers.RedisOptions{})
	if err := r.ShiftClock(ctxT(t, 5*time.Second), "+10s"); err == nil {
		t.Fatal("ShiftClock on a real-clock server succeeded")
	}
}

func openDB(t testing.TB, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSharedMySQL(t *testing.T) {
	t.Parallel()
	dsn1, dsn2 := servertest.MySQLDSN(t), servertest.MySQLDSN(t)
	if dsn1 == dsn2 {
		t.Fatal("same DSN twice")
	}
	ctx := ctxT(t, 30*time.Second)
	for _, dsn := range []string{dsn1, dsn2} {
		db := openDB(t, dsn)
		var one int
		var name string
		if err := db.QueryRowContext(ctx, "SELECT 1, DATABASE()").Scan(&one, &name); err != nil {
			t.Fatal(err)
		}
		if one != 1 || !strings.Contains(dsn, "/"+name+"?") {
			t.Fatalf("SELECT 1, DATABASE() = %d, %q; dsn %s", one, name, dsn)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
			t.Fatal(err) // fresh database: no table yet
		}
	}
}

func TestMySQLKillRestartPause(t *testing.T) {
	t.Parallel()
	m := servertest.NewMySQL(t, servers.MySQLOptions{})
	addr := m.Addr()
	dsn := servertest.NewDatabase(t, m)
	db := openDB(t, dsn)
	ctx := ctxT(t, 2*time.Minute)
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	count := func() (int, error) {
		var n int
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n)
		return n, err
	}

	// Pause: a query times out; after Resume it works.
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	var one int
	err := db.QueryRowContext(pctx, "SELECT 1").Scan(&one)
	cancel()
	if err == nil {
		t.Fatal("query answered while paused")
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("after resume: count %d, %v", n, err)
	}

	// Crash and restart keeping data: the committed row survives.
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := m.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("mysql restart (keep data) in %v", time.Since(t0).Round(time.Millisecond))
	if m.Addr() != addr {
		t.Fatalf("restarted on %s, want %s", m.Addr(), addr)
	}
	db.SetMaxIdleConns(0) // drop connections to the dead server
	db.SetMaxIdleConns(2)
	if n, err := count(); err != nil || n != 1 {
		t.Fatalf("after restart: count %d, %v", n, err)
	}

	// Restart wiping data: the database is gone.
	if err := m.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	db.SetMaxIdleConns(2)
	if _, err := count(); err == nil || !strings.Contains(err.Error(), "Unknown database") {
		t.Fatalf("after wipe: %v, want Unknown database", err)
	}
}

func zkConn(t testing.TB, addrs []string) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect(addrs, 4*time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := ctxT(t, 30*time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-ev:
		case <-ctx.Done():
			t.Fatalf("zookeeper %v: no session", addrs)
		}
	}
	return c
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func zkCreate(t testing.TB, c *zk.Conn, path string) {
	t.Helper()
	if _, err := c.Create(path, []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
}

func zkExists(t testing.TB, c *zk.Conn, path string) bool {
	t.Helper()
	ok, _, err := c.Exists(path)
	if err != nil {
		t.Fatalf("exists %s: %v", path, err)
	}
	return ok
}

func zkPath(t testing.TB) string {
	return "/" + strings.NewReplacer("/", "_", "=", "_", " ", "_").Replace(key(t))
}

func TestSharedZooKeeper(t *testing.T) {
	t.Parallel()
	z := servertest.ZooKeeper(t)
	c := zkConn(t, z.Addrs())
	p := zkPath(t)
	zkCreate(t, c, p)
	if !zkExists(t, c, p) {
		t.Fatalf("%s missing after create", p)
	}
	mode, err := z.Mode(ctxT(t, 5*time.Second))
	if err != nil || mode != "standalone" {
		t.Fatalf("mode %q, %v", mode, err)
	}
}

func TestZooKeeperKillRestartPause(t *testing.T) {
	t.Parallel()
	z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{})
	ctx := ctxT(t, time.Minute)
	p := zkPath(t)
	c := zkConn(t, z.Addrs())
	zkCreate(t, c, p)
	c.Close()

	if err := z.Pause(); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := z.FourLetter(pctx, "ruok")
	cancel()
	if err == nil {
		t.Fatal("ruok answered while paused")
	}
	if err := z.Resume(); err != nil {
		t.Fatal(err)
	}
	if s, err := z.FourLetter(ctx, "ruok"); err != nil || s != "imok" {
		t.Fatalf("ruok after resume: %q, %v", s, err)
	}

	if err := z.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := z.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("zookeeper restart in %v", time.Since(t0).Round(time.Millisecond))
	c = zkConn(t, z.Addrs())
	if !zkExists(t, c, p) {
		t.Fatalf("%s lost across restart with keepData", p)
	}
	c.Close()

	if err := z.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	c = zkConn(t, z.Addrs())
	if zkExists(t, c, p) {
		t.Fatalf("%s kept across restart without data", p)
	}
}

func TestZKEnsemble(t *testing.T) {
	t.Parallel()
	e := servertest.ZKEnsemble(t, 3)
	ctx := ctxT(t, time.Minute)
	old, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := zkConn(t, e.Addrs())
	p1 := zkPath(t)
	zkCreate(t, c, p1)

	killed, err := e.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if killed != old {
		t.Fatalf("killed %s, leader was %s", killed.Addr(), old.Addr())
	}
	t0 := time.Now()
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new zookeeper leader %s after %v", l.Addr(), time.Since(t0).Round(time.Millisecond))
	if l == old {
		t.Fatal("the killed member still leads")
	}
	// The remaining quorum answers.
	var rest []string
	for _, z := range e.Nodes {
		if z != old {
			rest = append(rest, z.Addr())
		}
	}
	c2 := zkConn(t, rest)
	if !zkExists(t, c2, p1) {
		t.Fatalf("%s lost with the leader", p1)
	}
	p2 := zkPath(t)
	zkCreate(t, c2, p2)

	// The old leader rejoins as a follower and catches up.
	if err := old.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if m, err := old.Mode(ctx); err != nil || m != "follower" {
		t.Fatalf("old leader mode %q, %v; want follower", m, err)
	}
	c3 := zkConn(t, []string{old.Addr()})
	if err := waitFor(ctx, func() bool { return zkExists(t, c3, p2) }); err != nil {
		// Sync makes the follower catch up with the leader first.
		t.Fatalf("%s not on the restarted member: %v", p2, err)
	}
}

// waitFor polls cond until true or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func etcdClient(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSharedEtcd(t *testing.T) {
	t.Parallel()
	e := servertest.Etcd(t)
	c := etcdClient(t, e.Endpoints())
	ctx := ctxT(t, 30*time.Second)
	k := key(t)
	if _, err := c.Put(ctx, k, "v"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, k)
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, %v", r, err)
	}
}

func TestEtcdStopPauseKillRestart(t *testing.T) {
	t.Parallel()
	e := servertest.NewEtcd(t, servers.EtcdOptions{})
	c := etcdClient(t, e.Endpoints())
	ctx := ctxT(t, time.Minute)
	k := key(t)
	if _, err := c.Put(ctx, k, "v"); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := c.Get(sctx, k)
	cancel()
	if err == nil {
		t.Fatal("Get answered while stopped")
	}
	get := func() (string, bool) {
		r, err := c.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			return "", false
		}
		return string(r.Kvs[0].Value), true
	}
	if err := e.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); !ok || v != "v" {
		t.Fatalf("after restart: %q %v", v, ok)
	}
	// A member is a process: it pauses (every thread stopped when Pause returns) and
	// dies at once on Kill.
	if err := e.Pause(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.Get(sctx, k)
	cancel()
	if err == nil {
		t.Fatal("Get answered while paused")
	}
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); !ok || v != "v" {
		t.Fatalf("after resume: %q %v", v, ok)
	}
	if err := e.Kill(); err != nil {
		t.Fatal(err)
	}
	if e.Running() {
		t.Fatal("killed member still running")
	}
	if err := e.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); !ok || v != "v" {
		t.Fatalf("after kill and restart: %q %v", v, ok)
	}
	if err := e.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(); ok {
		t.Fatalf("after wipe: %q still there", v)
	}
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	cl := servertest.EtcdCluster(t, 3)
	ctx := ctxT(t, time.Minute)
	c := etcdClient(t, cl.Endpoints())
	k := key(t)
	if _, err := c.Put(ctx, k, "1"); err != nil {
		t.Fatal(err)
	}
	old, err := cl.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if old.Running() {
		t.Fatal("killed leader still running")
	}
	t0 := time.Now()
	l, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new etcd leader %s after %v", l.Name(), time.Since(t0).Round(time.Millisecond))
	if l == old {
		t.Fatal("killed member still leads")
	}
	if _, err := c.Put(ctx, k, "2"); err != nil {
		t.Fatalf("Put without the old leader: %v", err)
	}
	if err := old.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The restarted member serves linearizable reads with the new value.
	c2 := etcdClient(t, old.Endpoints())
	r, err := c2.Get(ctx, k)
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("Get on restarted member = %v, %v", r, err)
	}
	if err := old.Restart(ctx, false); err == nil {
		t.Fatal("Restart(keepData=false) of a cluster member: want an error")
	}
}

func TestProxy(t *testing.T) {
	t.Parallel()
	r := servertest.NewRedis(t, servers.RedisOptions{})
	p := servertest.Proxy(t, r.Addr())
	newClient := func() *redis.Client {
		return redisClient(t, p.Addr())
	}
	k := key(t)
	c := newClient()
	mustSet(t, c, k, "v", 0)
	wantValue(t, c, k, "v")
	short := func(c *redis.Client) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return c.Get(ctx, k).Err()
	}

	t.Run("cut", func(t *testing.T) {
		p.Cut()
		t0 := time.Now()
		err := short(c)
		if err == nil {
			t.Fatal("GET through a cut proxy answered")
		}
		if isTimeout(err) {
			t.Fatalf("cut: %v after %v, want an immediate connection error", err, time.Since(t0))
		}
		if err := short(newClient()); err == nil || isTimeout(err) {
			t.Fatalf("new connection through a cut proxy: %v, want a connection error", err)
		}
		p.Restore()
		wantValue(t, newClient(), k, "v")
	})

	t.Run("blackhole", func(t *testing.T) {
		c := newClient()
		wantValue(t, c, k, "v")
		p.Blackhole()
		if err := short(c); !isTimeout(err) {
			t.Fatalf("blackholed: %v, want a time-out", err)
		}
		if err := short(newClient()); !isTimeout(err) {
			t.Fatalf("new connection, blackholed: %v, want a time-out", err)
		}
		p.Restore()
		wantValue(t, newClient(), k, "v")
	})

	t.Run("blackholed close", func(t *testing.T) {
		// A partition swallows the FIN too: the target hears of the client's close
		// only after Restore.
		target, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		bp := servertest.Proxy(t, target.Addr().String())
		c, err := net.Dial("tcp", bp.Addr())
		if err != nil {
			t.Fatal(err)
		}
		srv, err := target.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		bp.Blackhole()
		c.Close()
		srv.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("target side while blackholed: %v, want no news (a time-out)", err)
		}
		bp.Restore()
		srv.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("target side after Restore: %v, want EOF", err)
		}
	})

	t.Run("stall", func(t *testing.T) {
		c := newClient()
		wantValue(t, c, k, "v")
		p.Stall()
		if p.WaitStalled(50 * time.Millisecond) {
			t.Fatal("WaitStalled: bytes held before any were sent")
		}
		got := make(chan error, 1)
		go func() { got <- c.Get(context.Background(), k).Err() }()
		if !p.WaitStalled(10 * time.Second) {
			t.Fatal("WaitStalled: the GET is not held by the stalled proxy")
		}
		select {
		case err := <-got:
			t.Fatalf("GET through a stalled proxy returned %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		p.Restore()
		if err := <-got; err != nil {
			t.Fatalf("held GET after Restore: %v", err)
		}
	})

	t.Run("hold", func(t *testing.T) {
		other := k + "/other"
		mustSet(t, c, other, "w", 0)
		held, free := newClient(), newClient()
		wantValue(t, held, k, "v")
		wantValue(t, free, other, "w")
		p.Hold(k + "/other")
		got := make(chan error, 1)
		go func() { got <- held.Get(context.Background(), other).Err() }()
		if !p.WaitStalled(10 * time.Second) {
			t.Fatal("WaitStalled: the GET that matches is not held")
		}
		wantValue(t, free, k, "v") // a request that does not match goes through
		select {
		case err := <-got:
			t.Fatalf("held GET returned %v before Restore", err)
		default:
		}
		p.Restore()
		if err := <-got; err != nil {
			t.Fatalf("held GET after Restore: %v", err)
		}
	})

	t.Run("lose reply", func(t *testing.T) {
		c := newClient() // MaxRetries -1: the lost reply shows, not go-redis's retry
		wantValue(t, c, k, "v")
		lost := k + "/lost"
		p.LoseReply(lost)
		err := c.Set(context.Background(), lost, "set", 0).Err()
		if err == nil || isTimeout(err) {
			t.Fatalf("SET whose reply is lost: %v, want the connection closed", err)
		}
		wantValue(t, newClient(), lost, "set") // the request was served
		if err := c.Set(context.Background(), lost, "again", 0).Err(); err != nil {
			t.Fatalf("LoseReply fired twice: %v", err)
		}
	})
}

func TestExternalIsNotFaultable(t *testing.T) {
	t.Setenv(servers.EnvRedlockAddrs, "127.0.0.1:1,127.0.0.1:2")
	rs := servers.RedisMastersFromEnv(2)
	if len(rs) != 2 || rs[1].Addr() != "127.0.0.1:2" || !rs[0].External() {
		t.Fatalf("RedisMastersFromEnv = %v", rs)
	}
	if servers.RedisMastersFromEnv(3) != nil {
		t.Fatal("3 masters from a list of 2")
	}
	for name, err := range map[string]error{
		"Kill": rs[0].Kill(), "Pause": rs[0].Pause(), "Stop": rs[0].Stop(),
		"Restart": rs[0].Restart(context.Background(), true),
	} {
		if !errors.Is(err, servers.ErrExternal) {
			t.Errorf("%s on external: %v, want ErrExternal", name, err)
		}
	}
}
