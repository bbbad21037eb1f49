package servers

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Environment variables naming servers to use instead of starting them.
const (
	EnvRedisAddrs   = "DLOCK_REDIS_ADDRS"   // comma list; the first is the shared server
	EnvRedlockAddrs = "DLOCK_REDLOCK_ADDRS" // comma list of independent masters (SharedRedisMasters)
	EnvMySQLDSN     = "DLOCK_MYSQL_DSN"     // go-sql-driver DSN of a user allowed to CREATE DATABASE
	EnvZKAddrs      = "DLOCK_ZK_ADDRS"      // comma list
	EnvEtcdAddrs    = "DLOCK_ETCD_ADDRS"    // comma list of client host:port
	EnvRequire      = "DLOCK_REQUIRE_SERVERS"
)

// RequireServers reports whether DLOCK_REQUIRE_SERVERS=1: a missing server is
// then a failure, not a skip.
func RequireServers() bool { return os.Getenv(EnvRequire) == "1" }

func envList(name string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// once caches the outcome of starting one shared server until Shutdown.
type shared[T any] struct {
	mu  sync.Mutex
	v   T
	err error
	ok  bool
}

func (s *shared[T]) get(start func() (T, error)) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ok {
		s.v, s.err = start()
		s.ok = true
	}
	return s.v, s.err
}

func (s *shared[T]) reset() (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, had := s.v, s.ok && s.err == nil
	var zero T
	s.v, s.err, s.ok = zero, nil, false
	return v, had
}

var (
	sharedRedis  shared[*Redis]
	sharedMySQL  shared[*MySQL]
	sharedZK     shared[*ZooKeeper]
	sharedEtcd   shared[*Etcd]
	sharedPG     shared[*Postgres]
	cleanupMu    sync.Mutex
	cleanupFuncs []func()
)

func registerCleanup(f func()) {
	cleanupMu.Lock()
	cleanupFuncs = append(cleanupFuncs, f)
	cleanupMu.Unlock()
}

// SharedRedis returns the process-wide Redis: the first DLOCK_REDIS_ADDRS
// address, else a redis-server (local, or in a container) started on first use.
// Callers must not fault it and must use unique keys. An address from the
// environment is waited for until it answers PING (bounded by ctx, or
// DefaultStartTimeout): servers just brought up by compose are still starting.
func SharedRedis(ctx context.Context) (*Redis, error) {
	return sharedRedis.get(func() (*Redis, error) {
		if a := envList(EnvRedisAddrs); len(a) > 0 {
			r := externalRedis(a[0])
			return r, waitExternal(ctx, EnvRedisAddrs, r.ready)
		}
		return StartRedis(ctx, RedisOptions{})
	})
}

// SharedMySQL returns the process-wide MySQL server: DLOCK_MYSQL_DSN (waited for
// until it answers a ping), else a MariaDB (local, or in a container) started on
// first use. Use NewDatabase for a private database.
func SharedMySQL(ctx context.Context) (*MySQL, error) {
	return sharedMySQL.get(func() (*MySQL, error) {
		if dsn := os.Getenv(EnvMySQLDSN); dsn != "" {
			m, err := externalMySQL(dsn)
			if err != nil {
				return nil, err
			}
			return m, waitExternal(ctx, EnvMySQLDSN, m.ready)
		}
		return StartMySQL(ctx)
	})
}

// SharedZooKeeper returns the process-wide ZooKeeper: DLOCK_ZK_ADDRS (waited for
// until every address serves: an ensemble has a quorum), else a standalone server
// (local, or in a container) started on first use.
func SharedZooKeeper(ctx context.Context) (*ZooKeeper, error) {
	return sharedZK.get(func() (*ZooKeeper, error) {
		if a := envList(EnvZKAddrs); len(a) > 0 {
			z := externalZooKeeper(a)
			return z, waitExternal(ctx, EnvZKAddrs, func(ctx context.Context) error {
				for _, addr := range a {
					if _, err := (&ZooKeeper{addr: addr}).Mode(ctx); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return StartZooKeeper(ctx)
	})
}

// SharedEtcd returns the process-wide etcd: DLOCK_ETCD_ADDRS (waited for until
// every endpoint reports a leader), else a single member (a process of the etcd
// member binary, or a container with DLOCK_SERVERS=docker), started on first use.
func SharedEtcd(ctx context.Context) (*Etcd, error) {
	return sharedEtcd.get(func() (*Etcd, error) {
		if a := envList(EnvEtcdAddrs); len(a) > 0 {
			return externalEtcd(a), waitExternal(ctx, EnvEtcdAddrs, func(ctx context.Context) error {
				cli, err := etcdAdmin(a)
				if err != nil {
					return err
				}
				defer cli.Close()
				for _, ep := range a {
					st, err := cli.Status(ctx, ep)
					if err != nil {
						return err
					}
					if st.Leader == 0 {
						return fmt.Errorf("etcd %s: no leader", ep)
					}
				}
				return nil
			})
		}
		return StartEtcd(ctx)
	})
}

// SharedPostgres returns the process-wide PostgreSQL server: DLOCK_POSTGRES_URL
// (waited for until it answers a query), else a server (StartPostgres) started on
// first use. Use NewDatabase for a private database.
func SharedPostgres(ctx context.Context) (*Postgres, error) {
	return sharedPG.get(func() (*Postgres, error) {
		if raw := os.Getenv(EnvPostgresURL); raw != "" {
			p, err := externalPostgres(raw)
			if err != nil {
				return nil, err
			}
			return p, waitExternal(ctx, EnvPostgresURL, p.ready)
		}
		return StartPostgres(ctx, PostgresOptions{})
	})
}

// waitExternal polls check until a server named by the environment variable env
// answers, or ctx (DefaultStartTimeout without a deadline) ends.
func waitExternal(ctx context.Context, env string, check func(ctx context.Context) error) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("servers: the server in %s does not answer: %w (last: %v)", env, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RedisMastersFromEnv returns n external masters from DLOCK_REDLOCK_ADDRS, or
// nil when it names fewer than n. Used when redis-server is not installed.
func RedisMastersFromEnv(n int) []*Redis {
	a := envList(EnvRedlockAddrs)
	if len(a) < n {
		return nil
	}
	rs := make([]*Redis, n)
	for i := range rs {
		rs[i] = externalRedis(a[i])
	}
	return rs
}

// Shutdown closes every shared server and runs registered clean-ups. Later
// Shared* calls start new servers. Call it before exiting (servertest.Main
// does). The MariaDB template in the user cache directory is kept.
func Shutdown() {
	var wg sync.WaitGroup
	closeShared := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	closeShared(func() {
		if v, ok := sharedRedis.reset(); ok {
			v.Close()
		}
	})
	closeShared(func() {
		if v, ok := sharedMySQL.reset(); ok {
			v.Close()
		}
	})
	closeShared(func() {
		if v, ok := sharedZK.reset(); ok {
			v.Close()
		}
	})
	closeShared(func() {
		if v, ok := sharedEtcd.reset(); ok {
			v.Close()
		}
	})
	closeShared(func() {
		if v, ok := sharedPG.reset(); ok {
			v.Close()
		}
	})
	wg.Wait()
	cleanupMu.Lock()
	fs := cleanupFuncs
	cleanupFuncs = nil
	cleanupMu.Unlock()
	for _, f := range fs {
		f()
	}
}
