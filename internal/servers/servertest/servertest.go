// Package servertest gives tests real servers from package servers, with
// t.Cleanup registered and the skip-or-fail policy applied: a server that is
// not installed skips the test with the install command, unless
// DLOCK_REQUIRE_SERVERS=1, when it fails it.
//
// Shared servers (Redis, MySQL, ZooKeeper, Etcd) are started once per test
// binary and must not be faulted; callers keep apart by unique keys (MySQL:
// a fresh database per test). Private servers (New*, clusters) belong to one
// test, which may kill, pause and restart them. A package using shared
// servers calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { servertest.Main(m) }
package servertest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/spec"
)

// Main runs the tests of a package that uses these servers and exits with Finish's
// code. Call it from TestMain (after conformance.ChildMain, where that applies).
func Main(m *testing.M) {
	os.Exit(Finish(m.Run()))
}

// Finish ends a test binary that used these servers: it stops the shared servers,
// fails the run (code 1) if a child process it started is still running — killing
// it — or a container it started still exists — removing it — or, when the tests passed, if goroutines are left running (go.uber.org/goleak,
// with leakOpts). It returns the exit code. TestMains that must do something between
// m.Run and the end call it themselves: os.Exit(servertest.Finish(code)).
func Finish(code int, leakOpts ...goleak.Option) int {
	servers.Shutdown()
	if left := servers.ChildProcesses(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "servertest: %d child process(es) still running after the tests; killing:\n  %s\n",
			len(left), strings.Join(left, "\n  "))
		for _, l := range left {
			var pid int
			if _, err := fmt.Sscan(l, &pid); err == nil {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if code == 0 {
			code = 1
		}
	}
	if left := servers.Containers(true); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "servertest: %d container(s) still there after the tests; removed: %s\n",
			len(left), strings.Join(left, " "))
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(leakOpts...); err != nil {
			fmt.Fprintln(os.Stderr, "servertest: goroutines left running after the tests:", err)
			code = 1
		}
	}
	return code
}

// startCtx bounds a start-up.
func startCtx(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), servers.DefaultStartTimeout)
}

// check skips (server not installed, unless DLOCK_REQUIRE_SERVERS=1; a server kind
// without a container image under DLOCK_SERVERS=docker) or fails the test on err.
func check(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if servers.IsMissing(err) && !servers.RequireServers() || servers.IsNoImage(err) {
		t.Skipf("%s: %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

func start[T any](t testing.TB, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := startCtx(t)
	defer cancel()
	t0 := time.Now()
	v, err := f(ctx)
	check(t, what, err)
	t.Logf("%s ready in %v", what, time.Since(t0).Round(time.Millisecond))
	return v
}

// private starts a server (or a group of them) of the test's own with f, closed when
// the test ends.
func private[T interface{ Close() error }](t testing.TB, what string, f func(ctx context.Context) (T, error)) T {
	t.Helper()
	v := start(t, what, f)
	cleanup(t, v)
	return v
}

// shared returns the test binary's shared server that get returns (started on
// first use).
func shared[T any](t testing.TB, what string, get func(ctx context.Context) (T, error)) T {
	t.Helper()
	ctx, cancel := startCtx(t)
	defer cancel()
	v, err := get(ctx)
	check(t, "shared "+what, err)
	return v
}

func cleanup(t testing.TB, c interface{ Close() error }) {
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

// Redis returns the Redis shared by the whole test binary (see
// servers.SharedRedis). Do not fault it; use unique keys.
func Redis(t testing.TB) *servers.Redis {
	t.Helper()
	return shared(t, "redis", servers.SharedRedis)
}

// NewRedis starts a private Redis, closed when the test ends.
func NewRedis(t testing.TB, o servers.RedisOptions) *servers.Redis {
	t.Helper()
	return private(t, "redis", func(ctx context.Context) (*servers.Redis, error) { return servers.StartRedis(ctx, o) })
}

// RedisMasters starts n private independent masters (Redlock). Without
// redis-server it falls back to DLOCK_REDLOCK_ADDRS (external: not faultable).
func RedisMasters(t testing.TB, n int) []*servers.Redis {
	t.Helper()
	rs := start(t, "redis masters", func(ctx context.Context) ([]*servers.Redis, error) {
		rs, err := servers.StartRedisMasters(ctx, n)
		if servers.IsMissing(err) {
			if ext := servers.RedisMastersFromEnv(n); ext != nil {
				return ext, nil
			}
		}
		return rs, err
	})
	for _, r := range rs {
		cleanup(t, r)
	}
	return rs
}

// RedisReplicaPair starts a private master and its replica.
func RedisReplicaPair(t testing.TB) (master, replica *servers.Redis) {
	t.Helper()
	type pair struct{ m, r *servers.Redis }
	p := start(t, "redis replica pair", func(ctx context.Context) (pair, error) {
		m, r, err := servers.StartRedisReplicaPair(ctx)
		return pair{m, r}, err
	})
	cleanup(t, p.r)
	cleanup(t, p.m)
	return p.m, p.r
}

// RedisCluster starts a private Redis Cluster of n masters (n >= 3).
func RedisCluster(t testing.TB, n int) *servers.RedisCluster {
	t.Helper()
	return private(t, "redis cluster", func(ctx context.Context) (*servers.RedisCluster, error) {
		return servers.StartRedisCluster(ctx, n)
	})
}

// RedisSentinelGroup starts a private master with replicas replicas and sentinels
// sentinels monitoring it (see servers.StartRedisSentinelGroup).
func RedisSentinelGroup(t testing.TB, replicas, sentinels int) *servers.RedisSentinelGroup {
	t.Helper()
	return private(t, "redis sentinel group", func(ctx context.Context) (*servers.RedisSentinelGroup, error) {
		return servers.StartRedisSentinelGroup(ctx, replicas, sentinels)
	})
}

// SecureRedis starts a private Redis that speaks TLS only with pki's certificates
// and wants client certificates, whose default user has the password admin, with
// an ACL user name:password following rules (ACL SETUSER's arguments).
func SecureRedis(t testing.TB, pki *servers.PKI, admin, name, password string, rules []string) *servers.Redis {
	t.Helper()
	r := NewRedis(t, servers.RedisOptions{TLS: pki, Password: admin})
	ctx, cancel := startCtx(t)
	defer cancel()
	if _, err := r.Do(ctx, append([]string{"ACL", "SETUSER", name, "reset", ">" + password}, rules...)...); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	return r
}

// Open opens a Locker from rawURL with dlock.Open, closed when the test ends; it
// fails the test when Open does (the error, never the URL: it may hold a password).
func Open(t testing.TB, rawURL string) dlock.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Findings runs the deployment check (dlock.Inspect) on rawURL and returns its
// findings by Topic; it fails the test on an error.
func Findings(t testing.TB, rawURL string) map[string]spec.Finding {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs, err := dlock.Inspect(ctx, rawURL)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	m := map[string]spec.Finding{}
	for _, f := range fs {
		m[f.Topic()] = f
	}
	return m
}

// PKI generates a throw-away certificate authority (servers.NewPKI), removed when
// the test ends.
func PKI(t testing.TB) *servers.PKI {
	t.Helper()
	return PKIFor(t)
}

// PKIFor is PKI with a server certificate valid for exactly hosts
// (servers.NewPKIFor).
func PKIFor(t testing.TB, hosts ...string) *servers.PKI {
	t.Helper()
	p, err := servers.NewPKIFor(hosts...)
	if err != nil {
		t.Fatalf("pki: %v", err)
	}
	cleanup(t, p)
	return p
}

// MySQL returns the MySQL server shared by the test binary. Do not fault it.
func MySQL(t testing.TB) *servers.MySQL {
	t.Helper()
	return shared(t, "mysql", servers.SharedMySQL)
}

// MySQLDSN returns the DSN of a fresh database on the shared MySQL server,
// dropped when the test ends.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	return NewDatabase(t, MySQL(t))
}

// NewDatabase creates a fresh database on m, dropped when the test ends.
func NewDatabase(t testing.TB, m *servers.MySQL) string {
	t.Helper()
	return database(t, "mysql", m.NewDatabase, m.DropDatabase)
}

// database creates a fresh database with create and drops it with drop when the
// test ends, best effort (the server may be dead by then).
func database(t testing.TB, what string, create func(context.Context) (string, error), drop func(context.Context, string) error) string {
	t.Helper()
	ctx, cancel := startCtx(t)
	defer cancel()
	name, err := create(ctx)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = drop(ctx, name)
	})
	return name
}

// NewMySQL starts a private MariaDB server configured by o, closed when the test
// ends.
func NewMySQL(t testing.TB, o servers.MySQLOptions) *servers.MySQL {
	t.Helper()
	return private(t, "mysql", func(ctx context.Context) (*servers.MySQL, error) { return servers.StartMySQLWith(ctx, o) })
}

// ZooKeeper returns the ZooKeeper shared by the test binary. Do not fault it.
func ZooKeeper(t testing.TB) *servers.ZooKeeper {
	t.Helper()
	return shared(t, "zookeeper", servers.SharedZooKeeper)
}

// NewZooKeeper starts a private standalone ZooKeeper configured by o, closed when the
// test ends.
func NewZooKeeper(t testing.TB, o servers.ZooKeeperOptions) *servers.ZooKeeper {
	t.Helper()
	return private(t, "zookeeper", func(ctx context.Context) (*servers.ZooKeeper, error) { return servers.StartZooKeeperWith(ctx, o) })
}

// ZKEnsemble starts a private n-member ZooKeeper ensemble.
func ZKEnsemble(t testing.TB, n int) *servers.ZKEnsemble {
	t.Helper()
	return private(t, "zookeeper ensemble", func(ctx context.Context) (*servers.ZKEnsemble, error) {
		return servers.StartZooKeeperEnsemble(ctx, n)
	})
}

// Etcd returns the etcd shared by the test binary. Do not fault it.
func Etcd(t testing.TB) *servers.Etcd {
	t.Helper()
	return shared(t, "etcd", servers.SharedEtcd)
}

// NewEtcd starts a private single-member etcd configured by o, closed when the test
// ends.
func NewEtcd(t testing.TB, o servers.EtcdOptions) *servers.Etcd {
	t.Helper()
	return private(t, "etcd", func(ctx context.Context) (*servers.Etcd, error) { return servers.StartEtcdWith(ctx, o) })
}

// EtcdCluster starts a private n-member etcd cluster (a process per member).
func EtcdCluster(t testing.TB, n int) *servers.EtcdCluster {
	t.Helper()
	return private(t, "etcd cluster", func(ctx context.Context) (*servers.EtcdCluster, error) {
		return servers.StartEtcdCluster(ctx, n)
	})
}

// LeaderKills returns a fault for conformance.LeaderKiller: each call restarts (with
// its data) the member the previous call killed, so that every trial starts from a
// whole cluster, then kills the current leader with kill.
func LeaderKills[M interface {
	Restart(ctx context.Context, keepData bool) error
}](kill func(context.Context) (M, error)) func(testing.TB) {
	var killed M
	var have bool
	return func(t testing.TB) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if have {
			if err := killed.Restart(ctx, true); err != nil {
				t.Fatalf("restart the member killed before: %v", err)
			}
		}
		m, err := kill(ctx)
		if err != nil {
			t.Fatalf("kill the leader: %v", err)
		}
		killed, have = m, true
	}
}

// Proxy starts a TCP proxy in front of target, closed when the test ends.
func Proxy(t testing.TB, target string) *servers.Proxy {
	t.Helper()
	p, err := servers.NewProxy(target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	cleanup(t, p)
	return p
}

// Proxies starts a proxy to each of targets (host:port), closed when the test ends,
// and returns them and the addresses to dial, in targets' order.
func Proxies(t testing.TB, targets []string) (servers.Proxies, []string) {
	t.Helper()
	ps := make(servers.Proxies, len(targets))
	addrs := make([]string, len(targets))
	for i, target := range targets {
		ps[i] = Proxy(t, target)
		addrs[i] = ps[i].Addr()
	}
	return ps, addrs
}

// Postgres returns the PostgreSQL server shared by the test binary. Do not fault it.
func Postgres(t testing.TB) *servers.Postgres {
	t.Helper()
	return shared(t, "postgres", servers.SharedPostgres)
}

// NewPostgres starts a private PostgreSQL server configured by o, closed when the
// test ends.
func NewPostgres(t testing.TB, o servers.PostgresOptions) *servers.Postgres {
	t.Helper()
	return private(t, "postgres", func(ctx context.Context) (*servers.Postgres, error) { return servers.StartPostgres(ctx, o) })
}

// PostgresDatabase creates a fresh database on p, dropped when the test ends, and
// returns its name.
func PostgresDatabase(t testing.TB, p *servers.Postgres) string {
	t.Helper()
	return database(t, "postgres", p.NewDatabase, p.DropDatabase)
}

// PostgresReplicaPair starts a private primary and its streaming replica (see
// servers.StartPostgresReplicaPair), closed when the test ends.
func PostgresReplicaPair(t testing.TB, sync bool) (primary, replica *servers.Postgres) {
	t.Helper()
	type pair struct{ p, r *servers.Postgres }
	p := start(t, "postgres replica pair", func(ctx context.Context) (pair, error) {
		p, r, err := servers.StartPostgresReplicaPair(ctx, sync)
		return pair{p, r}, err
	})
	cleanup(t, p.r)
	cleanup(t, p.p)
	return p.p, p.r
}

// PgBouncer starts a private pgbouncer in front of target (host:port) pooling in
// mode, closed when the test ends.
func PgBouncer(t testing.TB, target, mode string, users ...string) *servers.PgBouncer {
	t.Helper()
	return private(t, "pgbouncer", func(ctx context.Context) (*servers.PgBouncer, error) {
		return servers.StartPgBouncer(ctx, target, mode, users...)
	})
}

// Links records the link through which each client of a test harness reaches its
// servers (a *servers.Proxy, or servers.Proxies for one per endpoint), so that the
// harness can cut or blackhole one client's link. The zero value is ready; it is
// safe for concurrent use.
type Links[P any] struct {
	mu sync.Mutex
	m  map[dlock.Locker]P
}

// Add records that l reaches its servers through p, until t ends.
func (ls *Links[P]) Add(t testing.TB, l dlock.Locker, p P) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.m == nil {
		ls.m = map[dlock.Locker]P{}
	}
	ls.m[l] = p
	t.Cleanup(func() {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		delete(ls.m, l)
	})
}

// Of returns the link of l; it fails t when l has none (not a client of the
// harness, or its test has ended).
func (ls *Links[P]) Of(t testing.TB, l dlock.Locker) P {
	t.Helper()
	ls.mu.Lock()
	p, ok := ls.m[l]
	ls.mu.Unlock()
	if !ok {
		t.Fatal("not a client of this harness: it has no link to cut")
	}
	return p
}

// PooledConns opens n connections to database db through the pgbouncer b, closed
// when the test ends, in pgx's exec mode (no prepared statements: a transaction
// pooler hands each transaction any server session).
func PooledConns(t testing.TB, b *servers.PgBouncer, db string, n int) []*pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	ctx, cancel := startCtx(t)
	defer cancel()
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("pgbouncer: %v", err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		conns[i] = c
	}
	return conns
}

// CrashAndRestart kills the server s (SIGKILL: no clean shutdown) and starts it
// again on its data; it fails t if either step fails.
func CrashAndRestart(t testing.TB, s interface {
	Kill() error
	Restart(ctx context.Context, keepData bool) error
}) {
	t.Helper()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	if err := s.Restart(ctx, true); err != nil {
		t.Fatal(err)
	}
}
