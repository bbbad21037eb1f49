package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/internal/servers"
)

// env is one set of servers and the addresses of those that started.
type env struct {
	ep      Endpoints
	missing map[Store]error // stores whose servers could not be started
	started map[Store]bool  // stores start has tried
	closers []func()
}

// newEnv returns an env with no servers yet.
func newEnv() *env {
	return &env{ep: Endpoints{Run: runID(), Mem: memlock.NewStore()}, missing: map[Store]error{}, started: map[Store]bool{}}
}

// start starts (or finds) the servers of the given stores that e has not tried yet:
// the process-wide shared Redis, MySQL, ZooKeeper, etcd and PostgreSQL of package
// servers, five Redis masters of its own (or DLOCK_REDLOCK_ADDRS) and fresh MySQL and
// PostgreSQL databases. A
// store whose server cannot be started is recorded in missing; close gives back what
// start made, but not the shared servers (servers.Shutdown stops those).
func (e *env) start(ctx context.Context, stores ...Store) {
	var todo []Store
	for _, s := range stores {
		if !e.started[s] {
			e.started[s] = true
			todo = append(todo, s)
		}
	}
	stores = todo
	var mu sync.Mutex
	var wg sync.WaitGroup
	fail := func(s Store, err error) {
		mu.Lock()
		e.missing[s] = err
		mu.Unlock()
	}
	onClose := func(f func()) {
		mu.Lock()
		e.closers = append(e.closers, f)
		mu.Unlock()
	}
	// dropOnClose removes a database start made, on close.
	dropOnClose := func(drop func(ctx context.Context) error) {
		onClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = drop(ctx)
		})
	}
	start := func(s Store, f func() error) {
		if slices.Contains(stores, s) {
			wg.Go(func() {
				if err := f(); err != nil {
					fail(s, err)
				}
			})
		}
	}
	start(Redis, func() error {
		r, err := servers.SharedRedis(ctx)
		if err == nil {
			e.ep.Redis = r.Addr()
		}
		return err
	})
	start(Redis5, func() error {
		ms := servers.RedisMastersFromEnv(5)
		if ms == nil {
			var err error
			if ms, err = servers.StartRedisMasters(ctx, 5); err != nil {
				return err
			}
			onClose(func() {
				for _, m := range ms {
					m.Close()
				}
			})
		}
		for _, m := range ms {
			e.ep.Masters = append(e.ep.Masters, m.Addr())
		}
		return nil
	})
	start(MySQL, func() error {
		m, err := servers.SharedMySQL(ctx)
		if err != nil {
			return err
		}
		dsn, err := m.NewDatabase(ctx)
		if err != nil {
			return err
		}
		dropOnClose(func(ctx context.Context) error { return m.DropDatabase(ctx, dsn) })
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return err
		}
		e.ep.MySQL = cfg
		return nil
	})
	start(ZooKeeper, func() error {
		z, err := servers.SharedZooKeeper(ctx)
		if err == nil {
			e.ep.ZooKeeper = z.Addrs()
		}
		return err
	})
	start(Etcd, func() error {
		// A member in a process of its own, with its data on disk, as users run
		// etcd: an embedded one would share this process's CPU scheduling, and its
		// heap (the keyspace's history grows with every grant) would be counted in
		// the soak's.
		c, err := servers.StartEtcdCluster(ctx, 1)
		if err != nil {
			return err
		}
		onClose(func() { _ = c.Close() })
		e.ep.Etcd = c.Endpoints()
		return nil
	})
	start(Postgres, func() error {
		p, err := servers.SharedPostgres(ctx)
		if err != nil {
			return err
		}
		db, err := p.NewDatabase(ctx)
		if err != nil {
			return err
		}
		dropOnClose(func(ctx context.Context) error { return p.DropDatabase(ctx, db) })
		u, err := url.Parse(p.URL(db))
		if err != nil {
			return err
		}
		e.ep.Postgres = u
		return nil
	})
	wg.Wait()
}

func (e *env) close() {
	for _, f := range slices.Backward(e.closers) {
		f()
	}
	e.closers = nil
}

// proxies puts a servers.Proxy in front of every address of store s and returns the
// endpoints that lead through them.
func (e *env) proxies(s Store) (Endpoints, []*servers.Proxy, error) {
	var ps []*servers.Proxy
	var err error
	ep := e.ep.via(s, func(addr string) string {
		p, perr := servers.NewProxy(addr)
		if perr != nil {
			err = perr
			return addr
		}
		ps = append(ps, p)
		return p.Addr()
	})
	if err != nil {
		for _, p := range ps {
			p.Close()
		}
		return Endpoints{}, nil, fmt.Errorf("proxy: %w", err)
	}
	return ep, ps, nil
}

func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
