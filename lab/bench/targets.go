package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/lab/peers/bsmpeer"
	"github.com/dlock-go/dlock/lab/peers/etcdpeer"
	"github.com/dlock-go/dlock/lab/peers/getlockpeer"
	"github.com/dlock-go/dlock/lab/peers/pgadvisorypeer"
	"github.com/dlock-go/dlock/lab/peers/redsyncpeer"
	"github.com/dlock-go/dlock/lab/peers/zkpeer"

	// The schemes our backends are opened by.
	_ "github.com/dlock-go/dlock/backends/etcdlock"
	_ "github.com/dlock-go/dlock/backends/mysqllock"
	_ "github.com/dlock-go/dlock/backends/pglock"
	_ "github.com/dlock-go/dlock/backends/redislock"
	_ "github.com/dlock-go/dlock/backends/redlock"
	_ "github.com/dlock-go/dlock/backends/zklock"
)

// Kind says whether a Target is one of dlock's backends, a peer (a library people
// use today, adapted to dlock.Locker), or a raw baseline.
type Kind string

// The kinds of rows in Results.
const (
	Backend Kind = "backend"
	Peer    Kind = "peer"
	Raw     Kind = "raw"
)

// Store names the set of servers a Target runs on.
type Store string

// The stores. Every Target of one store runs on the same servers.
const (
	Memory    Store = "mem"       // in-process (no server): the framework's own cost
	Redis     Store = "redis"     // one Redis
	Redis5    Store = "redis5"    // five independent Redis masters
	MySQL     Store = "mysql"     // one MariaDB/MySQL, a fresh database per run
	ZooKeeper Store = "zookeeper" // one standalone ZooKeeper
	Etcd      Store = "etcd"      // one etcd member, a process of its own (servers.StartEtcdCluster)
	Postgres  Store = "postgres"  // one PostgreSQL, a fresh database per run
)

// Endpoints are the addresses of one set of servers. A crash measurement builds a
// copy whose addresses lead through proxies (see via).
type Endpoints struct {
	Redis     string        // host:port
	Masters   []string      // host:port of each independent master
	MySQL     *mysql.Config // go-sql-driver configuration, database included
	Postgres  *url.URL      // postgres:// URL of the database, as the server's superuser
	ZooKeeper []string      // host:port
	Etcd      []string      // host:port (client URLs without scheme)
	Mem       *memlock.Store
	Run       string // this run's id: keys, roots and prefixes are made unique with it
}

// addrs returns the server addresses store uses.
func (ep Endpoints) addrs(s Store) []string {
	switch s {
	case Redis:
		return []string{ep.Redis}
	case Redis5:
		return ep.Masters
	case MySQL:
		if ep.MySQL == nil {
			return nil
		}
		return []string{ep.MySQL.Addr}
	case ZooKeeper:
		return ep.ZooKeeper
	case Etcd:
		return ep.Etcd
	case Postgres:
		if ep.Postgres == nil {
			return nil
		}
		return []string{ep.Postgres.Host}
	}
	return nil
}

// via returns a copy of ep in which every address of store s is replaced by
// through(address).
func (ep Endpoints) via(s Store, through func(string) string) Endpoints {
	mapAll := func(in []string) []string {
		out := make([]string, len(in))
		for i, a := range in {
			out[i] = through(a)
		}
		return out
	}
	switch s {
	case Redis:
		ep.Redis = through(ep.Redis)
	case Redis5:
		ep.Masters = mapAll(ep.Masters)
	case MySQL:
		c := ep.MySQL.Clone()
		c.Addr = through(c.Addr)
		ep.MySQL = c
	case ZooKeeper:
		ep.ZooKeeper = mapAll(ep.ZooKeeper)
	case Etcd:
		ep.Etcd = mapAll(ep.Etcd)
	case Postgres:
		u := *ep.Postgres
		u.Host = through(u.Host)
		ep.Postgres = &u
	}
	return ep
}

// mysqlURL is the mysql:// (or mysql+getlock://) URL of ep's database.
func (ep Endpoints) mysqlURL(scheme string, query string) string {
	u := url.URL{Scheme: scheme, Host: ep.MySQL.Addr, Path: "/" + ep.MySQL.DBName, RawQuery: query}
	if ep.MySQL.Passwd != "" {
		u.User = url.UserPassword(ep.MySQL.User, ep.MySQL.Passwd)
	} else {
		u.User = url.User(ep.MySQL.User)
	}
	return u.String()
}

// Target is one lock implementation under measurement.
type Target struct {
	Name  string
	Kind  Kind // Backend or Peer
	Store Store
	// Baseline names the raw round trips this target is compared with ("" for none).
	Baseline string
	// Open returns a new client, as independent of every other client as another
	// process's would be (its own connections or session). timeout is the lease TTL,
	// or the session timeout for backends whose locks last as long as a session; the
	// measurements pass the same value to WithTTL.
	Open func(ctx context.Context, ep Endpoints, timeout time.Duration) (dlock.Locker, error)
	// CrashNote says what frees the lock of a holder that vanished, for timeout.
	CrashNote func(timeout time.Duration) string
}

// slug is a form of the target's name usable in keys, paths and metric units.
func slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '+', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

func open(rawURL string) func(ctx context.Context) (dlock.Locker, error) {
	return func(ctx context.Context) (dlock.Locker, error) { return dlock.Open(ctx, rawURL) }
}

func ttlNote(what string) func(time.Duration) string {
	return func(d time.Duration) string { return fmt.Sprintf("%s %v", what, d) }
}

// Targets returns every backend and peer this package measures, in report order.
func Targets() []Target {
	redisURL := func(scheme, query string) func(context.Context, Endpoints, time.Duration) (dlock.Locker, error) {
		return func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
			u := scheme + "://" + ep.Redis
			if query != "" {
				u += "?" + query
			}
			return open(u)(ctx)
		}
	}
	return []Target{
		{Name: "mem", Kind: Backend, Store: Memory,
			Open: func(_ context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return memlock.New(memlock.WithStore(ep.Mem)), nil
			}},
		{Name: "redis", Kind: Backend, Store: Redis, Baseline: rawRedis, Open: redisURL("redis", ""), CrashNote: ttlNote("TTL")},
		{Name: "redis fifo", Kind: Backend, Store: Redis, Baseline: rawRedis, Open: redisURL("redis", "fifo=true"), CrashNote: ttlNote("TTL")},
		{Name: "redis+setnx/getset", Kind: Backend, Store: Redis, Baseline: rawRedis, Open: redisURL("redis+setnx", "variant=getset"), CrashNote: ttlNote("TTL")},
		{Name: "redis+setnx/expire", Kind: Backend, Store: Redis, Baseline: rawRedis, Open: redisURL("redis+setnx", "variant=expire"), CrashNote: ttlNote("TTL")},
		{Name: "bsm/redislock", Kind: Peer, Store: Redis, Baseline: rawRedis, CrashNote: ttlNote("TTL"),
			Open: func(_ context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				c := redis.NewClient(&redis.Options{Addr: ep.Redis})
				return closing(bsmpeer.New(c), c.Close), nil
			}},
		{Name: "redsync", Kind: Peer, Store: Redis, Baseline: rawRedis, CrashNote: ttlNote("TTL"),
			Open: func(_ context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return redsyncOn([]string{ep.Redis}), nil
			}},
		{Name: "redlock(5)", Kind: Backend, Store: Redis5, Baseline: rawRedis5, CrashNote: ttlNote("TTL"),
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return open("redlock://" + strings.Join(ep.Masters, ","))(ctx)
			}},
		{Name: "redsync(5)", Kind: Peer, Store: Redis5, Baseline: rawRedis5, CrashNote: ttlNote("TTL"),
			Open: func(_ context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return redsyncOn(ep.Masters), nil
			}},
		{Name: "mysql", Kind: Backend, Store: MySQL, Baseline: rawMySQL, CrashNote: ttlNote("TTL"),
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return open(ep.mysqlURL("mysql", ""))(ctx)
			}},
		{Name: "mysql fifo", Kind: Backend, Store: MySQL, Baseline: rawMySQL, CrashNote: ttlNote("TTL"),
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return open(ep.mysqlURL("mysql", "fifo=true"))(ctx)
			}},
		{Name: "mysql+getlock", Kind: Backend, Store: MySQL, Baseline: rawGetLock,
			CrashNote: func(time.Duration) string { return "connection closed" },
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return open(ep.mysqlURL("mysql+getlock", ""))(ctx)
			}},
		{Name: "mysql GET_LOCK", Kind: Peer, Store: MySQL, Baseline: rawGetLock,
			CrashNote: func(time.Duration) string { return "connection closed" },
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				db, err := sql.Open("mysql", ep.MySQL.FormatDSN())
				if err != nil {
					return nil, err
				}
				return closing(getlockpeer.New(db), db.Close), nil
			}},
		{Name: "zk", Kind: Backend, Store: ZooKeeper, Baseline: rawZK, CrashNote: ttlNote("session timeout"),
			Open: func(ctx context.Context, ep Endpoints, timeout time.Duration) (dlock.Locker, error) {
				return open(fmt.Sprintf("zk://%s/dlock-bench-%s?session_timeout=%v", strings.Join(ep.ZooKeeper, ","), ep.Run, timeout))(ctx)
			}},
		{Name: "zk.Lock", Kind: Peer, Store: ZooKeeper, Baseline: rawZK, CrashNote: ttlNote("session timeout"),
			Open: func(ctx context.Context, ep Endpoints, timeout time.Duration) (dlock.Locker, error) {
				return zkpeer.New(ep.ZooKeeper, timeout, zkpeer.WithRoot("/zklock-bench-"+ep.Run))
			}},
		{Name: "etcd", Kind: Backend, Store: Etcd, Baseline: rawEtcd,
			CrashNote: func(d time.Duration) string {
				return fmt.Sprintf("TTL %v (lease %ds)", d, int64((d+time.Second-1)/time.Second)+1)
			},
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				return open(fmt.Sprintf("etcd://%s/dlock-bench-%s", strings.Join(ep.Etcd, ","), ep.Run))(ctx)
			}},
		{Name: "etcd-mutex", Kind: Peer, Store: Etcd, Baseline: rawEtcd,
			CrashNote: func(d time.Duration) string { return fmt.Sprintf("session TTL %ds", sessionSecs(d)) },
			Open: func(ctx context.Context, ep Endpoints, timeout time.Duration) (dlock.Locker, error) {
				cli, err := etcdClient(ep.Etcd)
				if err != nil {
					return nil, err
				}
				l, err := etcdpeer.New(ctx, cli, etcdpeer.WithPrefix("/mutex-bench-"+ep.Run+"/"), etcdpeer.WithSessionTTL(sessionSecs(timeout)))
				if err != nil {
					cli.Close()
					return nil, err
				}
				return closing(l, cli.Close), nil
			}},
		{Name: "postgres", Kind: Backend, Store: Postgres, Baseline: rawPgTable, Open: pgOpen(""), CrashNote: ttlNote("TTL")},
		{Name: "postgres fifo", Kind: Backend, Store: Postgres, Baseline: rawPgTable, Open: pgOpen("fifo=true"), CrashNote: ttlNote("TTL")},
		// The server frees a vanished client's advisory locks as soon as it hears its
		// connection close, else once the session has been idle for session_timeout
		// (idle_session_timeout; the lease pings it every check_interval, cut to a
		// third of it, while it lives).
		{Name: "postgres+advisory", Kind: Backend, Store: Postgres, Baseline: rawPgAdvisory,
			CrashNote: func(d time.Duration) string { return fmt.Sprintf("connection closed (else session timeout %v)", d) },
			Open: func(ctx context.Context, ep Endpoints, timeout time.Duration) (dlock.Locker, error) {
				return open(ep.pgURL("postgres+advisory", fmt.Sprintf("session_timeout=%v", timeout)))(ctx)
			}},
		// Session advisory locks as users write them (lab/peers/pgadvisorypeer): a
		// pool per client, a connection of it per lease, the server's own wait queue.
		{Name: "pg_advisory_lock", Kind: Peer, Store: Postgres, Baseline: rawPgAdvisory,
			CrashNote: func(time.Duration) string { return "connection closed" },
			Open: func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
				pool, err := pgxpool.New(ctx, ep.Postgres.String())
				if err != nil {
					return nil, err
				}
				return closing(pgadvisorypeer.New(pool), func() error { pool.Close(); return nil }), nil
			}},
	}
}

// sessionSecs is the etcd session TTL in whole seconds for timeout (rounded up).
func sessionSecs(timeout time.Duration) int {
	return int((timeout + time.Second - 1) / time.Second)
}

func redsyncOn(addrs []string) dlock.Locker {
	clients := make([]redis.UniversalClient, len(addrs))
	closers := make([]func() error, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		clients[i], closers[i] = c, c.Close
	}
	return closing(redsyncpeer.New(clients), closers...)
}

func etcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// closingLocker closes the clients a peer was built on after the peer itself (peers
// do not close the clients they are given).
type closingLocker struct {
	dlock.Locker
	closers []func() error
	once    sync.Once
	err     error
}

func closing(l dlock.Locker, closers ...func() error) dlock.Locker {
	return &closingLocker{Locker: l, closers: closers}
}

func (c *closingLocker) Close() error {
	c.once.Do(func() {
		errs := []error{c.Locker.Close()}
		for _, f := range c.closers {
			errs = append(errs, f())
		}
		c.err = errors.Join(errs...)
	})
	return c.err
}

// The raw baselines: the fewest round trips a lock on each store can take.
const (
	rawRedis   = "SET NX PX + DEL"
	rawRedis5  = "5×(SET NX PX) + 5×DEL, parallel"
	rawMySQL   = "INSERT + DELETE"
	rawGetLock = "GET_LOCK + RELEASE_LOCK"
	rawZK      = "create + delete znode"
	rawEtcd    = "etcd Txn put + delete"
)

// baseline is one raw acquire+release, on clients of its own.
type baseline struct {
	Name  string
	ID    string // short name: the sub-benchmark's
	Store Store
	// open returns one raw acquire+release of key on a new client, and the client's
	// close.
	open func(ctx context.Context, ep Endpoints, key string) (cycle func(ctx context.Context) error, closeFn func(), err error)
}

func baselines() []baseline {
	return []baseline{
		{Name: rawRedis, Store: Redis, ID: "redis", open: func(_ context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
			c := redis.NewClient(&redis.Options{Addr: ep.Redis})
			return func(ctx context.Context) error { return setDel(ctx, c, key) }, func() { c.Close() }, nil
		}},
		{Name: rawRedis5, Store: Redis5, ID: "redis5", open: func(_ context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
			cs := make([]*redis.Client, len(ep.Masters))
			for i, a := range ep.Masters {
				cs[i] = redis.NewClient(&redis.Options{Addr: a})
			}
			closeAll := func() {
				for _, c := range cs {
					c.Close()
				}
			}
			return func(ctx context.Context) error { return fanOut(ctx, cs, key) }, closeAll, nil
		}},
		{Name: rawMySQL, Store: MySQL, ID: "mysql", open: openRawMySQL},
		{Name: rawGetLock, Store: MySQL, ID: "getlock", open: openRawGetLock},
		{Name: rawZK, Store: ZooKeeper, ID: "zk", open: openRawZK},
		{Name: rawEtcd, Store: Etcd, ID: "etcd", open: func(ctx context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
			cli, err := etcdClient(ep.Etcd)
			if err != nil {
				return nil, nil, err
			}
			k := "/raw-bench-" + ep.Run + "/" + key
			return func(ctx context.Context) error {
				resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, "")).Commit()
				if err != nil {
					return err
				}
				if !resp.Succeeded {
					return fmt.Errorf("raw etcd: %s exists", k)
				}
				_, err = cli.Delete(ctx, k)
				return err
			}, func() { cli.Close() }, nil
		}},
		{Name: rawPgTable, Store: Postgres, ID: "postgres", open: openRawPgTable},
		{Name: rawPgAdvisory, Store: Postgres, ID: "advisory", open: openRawPgAdvisory},
	}
}

// setDel is SET key NX PX 10000, then DEL key.
func setDel(ctx context.Context, c *redis.Client, key string) error {
	ok, err := c.SetNX(ctx, key, "owner", 10*time.Second+time.Millisecond).Result() // not whole seconds: PX
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("raw redis: %s is set", key)
	}
	return c.Del(ctx, key).Err()
}

// fanOut sends SET NX PX to every master in parallel, waits for all, then DEL alike.
func fanOut(ctx context.Context, cs []*redis.Client, key string) error {
	errs := make([]error, len(cs))
	each := func(f func(c *redis.Client) error) error {
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { errs[i] = f(c) })
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := each(func(c *redis.Client) error {
		ok, err := c.SetNX(ctx, key, "owner", 10*time.Second+time.Millisecond).Result()
		if err == nil && !ok {
			err = fmt.Errorf("raw redis: %s is set", key)
		}
		return err
	}); err != nil {
		return err
	}
	return each(func(c *redis.Client) error { return c.Del(ctx, key).Err() })
}

func openRawMySQL(ctx context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
	db, err := sql.Open("mysql", ep.MySQL.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (func(context.Context) error, func(), error) { db.Close(); return nil, nil, err }
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS raw_locks (lock_key VARBINARY(255) NOT NULL PRIMARY KEY,
		owner BINARY(16) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`); err != nil {
		return fail(err)
	}
	ins, err := db.PrepareContext(ctx, "INSERT INTO raw_locks (lock_key, owner, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)")
	if err != nil {
		return fail(err)
	}
	del, err := db.PrepareContext(ctx, "DELETE FROM raw_locks WHERE lock_key = ? AND owner = ?")
	if err != nil {
		ins.Close()
		return fail(err)
	}
	owner := []byte("0123456789abcdef")
	cycle := func(ctx context.Context) error {
		if _, err := ins.ExecContext(ctx, key, owner, int64(10*time.Second/time.Microsecond)); err != nil {
			return err
		}
		res, err := del.ExecContext(ctx, key, owner)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("raw DELETE removed %d rows", n)
		}
		return nil
	}
	return cycle, func() { ins.Close(); del.Close(); db.Close() }, nil
}

func openRawGetLock(_ context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
	db, err := sql.Open("mysql", ep.MySQL.FormatDSN())
	if err != nil {
		return nil, nil, err
	}
	cycle := func(ctx context.Context) error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", key).Scan(&got); err != nil || got.Int64 != 1 {
			return fmt.Errorf("GET_LOCK: %v %v", got, err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", key).Scan(&got); err != nil || got.Int64 != 1 {
			return fmt.Errorf("RELEASE_LOCK: %v %v", got, err)
		}
		return nil
	}
	return cycle, func() { db.Close() }, nil
}

func openRawZK(ctx context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
	conn, events, err := zk.Connect(ep.ZooKeeper, 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		return nil, nil, err
	}
	for ev := range events { // the first requests would otherwise wait for the session
		if ev.State == zk.StateHasSession {
			break
		}
		if ctx.Err() != nil {
			conn.Close()
			return nil, nil, ctx.Err()
		}
	}
	dir := "/raw-bench-" + ep.Run
	acl := zk.WorldACL(zk.PermAll)
	for _, p := range []string{dir, dir + "/" + slug(key)} {
		if _, err := conn.Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			conn.Close()
			return nil, nil, err
		}
	}
	prefix := dir + "/" + slug(key) + "/lock-"
	cycle := func(context.Context) error {
		p, err := conn.Create(prefix, nil, zk.FlagEphemeralSequential, acl)
		if err != nil {
			return err
		}
		return conn.Delete(p, -1)
	}
	return cycle, func() {
		_ = conn.Delete(dir+"/"+slug(key), -1)
		conn.Close()
	}, nil
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
