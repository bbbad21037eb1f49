package cli

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

var outliveTrials = flag.Int("outlive-trials", 1, "trials of each backend and loss mode in TestCommandNeverOutlivesLock")

// lossMode is one way a holder's lock ends while its command runs.
type lossMode struct {
	name string
	// reported: the store itself reports the loss (the lock deleted, the connection
	// killed), which frees the lock at once; the second run starts once the holder's
	// dlock has said so. Otherwise the second run waits for the lock from before the
	// fault, and takes it the moment the store frees it.
	reported bool
	// fault breaks the holder's lock on key (nil: the background-child case, where
	// the holder's command starts a background process and exits 0).
	fault func(t *testing.T, key string)
	// heal undoes the fault once the holder's dlock has exited (nil: nothing to undo).
	heal func(t *testing.T)
	// holderURL and nextURL, when set, replace the target's (a server of the mode's own).
	holderURL, nextURL string
	// nextAfterHeal: the next run starts once the fault is healed (Redlock refuses an
	// Acquire while a majority of its masters is hung, rather than wait).
	nextAfterHeal bool
	// abrupt: an inferred loss (the next run waits from before the fault) that the
	// backend reports with no deadline to wait for — it drops its connection, which
	// may free the lock at once — so the command gets SIGKILL at once, as for a
	// reported loss (postgres+advisory's unanswered ping).
	abrupt bool
}

// outliveTarget is one backend: the holder's URL (through a proxy where a mode cuts
// its link), the next holder's, extra flags of both runs, and its loss modes.
type outliveTarget struct {
	holderURL, nextURL string
	args               []string
	modes              []lossMode
}

// background is the background-child case.
var background = lossMode{name: "background child"}

// TestCommandNeverOutlivesLock: on every backend and each of its loss modes, the
// holder's command — which ignores SIGTERM and appends a timestamp to a file every
// 2ms — never writes after a second dlock run on its key has started its own: in
// every trial the holder's last stamp precedes the next holder's first, and the
// margin between them is logged. The modes: a partition (the holder's link
// blackholed), a hung store (the server paused), the lock deleted behind the
// holder's back, its connection killed, its session terminated or its lease
// revoked; and the background child: the holder's command starts a stamping
// process in the background and exits 0, and that process is gone before the lock
// is released.
//
// A loss the holder infers (partition, hung store) is judged against a next holder
// that waits from before the fault: the holder's command is killed by its lease's
// deadline, before the store frees the lock. A loss the store reports frees the lock
// at once, before anyone can know: the next run starts once the holder's dlock has
// said the lease is lost — by then its command must be dead (SIGKILL at once, not
// SIGTERM and a grace period).
func TestCommandNeverOutlivesLock(t *testing.T) {
	for _, b := range []struct {
		name  string
		setup func(t *testing.T) outliveTarget
	}{
		{"redis", outliveRedis},
		{"redlock", outliveRedlock},
		{"mysql", outliveMySQL},
		{"mysql+getlock", outliveGetLock},
		{"zk", outliveZK},
		{"etcd", outliveEtcd},
		{"postgres", outlivePostgres},
		{"postgres+advisory", outliveAdvisory},
	} {
		t.Run(b.name, func(t *testing.T) {
			tg := b.setup(t)
			for _, m := range tg.modes {
				t.Run(m.name, func(t *testing.T) {
					var margins []time.Duration
					for i := range *outliveTrials {
						if d, ok := outliveTrial(t, tg, m, i); ok {
							margins = append(margins, d)
						}
					}
					t.Logf("margins between the holder's last write and the next holder's first: %v", margins)
				})
			}
		})
	}
	t.Run("mem/background child", func(t *testing.T) {
		// One process: nothing else can hold its locks. The background process is gone
		// when dlock has exited.
		file := filepath.Join(t.TempDir(), "stamps")
		cmd, stop := backgroundStamp(file)
		defer stop()
		p := startDlock(t, append([]string{"run", "--url", "mem://", "--key", "k", "--"}, cmd...)...)
		expect(t, p.out, "ready")
		p.waitCode(t, 0)
		outputEnds(t, p, "the background process outlived dlock run")
	})
}

// outliveTrial runs one trial; it returns the margin and whether both wrote.
func outliveTrial(t *testing.T, tg outliveTarget, m lossMode, i int) (time.Duration, bool) {
	t.Helper()
	key, file := uniqueKey(t), filepath.Join(t.TempDir(), "stamps")
	cmd := []string{childBin, "stamp", file, "A"}
	if m.fault == nil {
		var stop func()
		cmd, stop = backgroundStamp(file)
		defer stop()
	}
	run := func(url string, extra []string, cmd ...string) *proc {
		args := append([]string{"run", "--url", url, "--key", key}, tg.args...)
		args = append(append(args, extra...), "--")
		return startDlock(t, append(args, cmd...)...)
	}
	holderURL, nextURL := tg.holderURL, tg.nextURL
	if m.holderURL != "" {
		holderURL, nextURL = m.holderURL, m.nextURL
	}
	a := run(holderURL, nil, cmd...)
	expect(t, a.out, "ready")
	var b *proc
	next := func() { b = run(nextURL, []string{"--wait", "1m"}, childBin, "stamp", file, "B") }
	if !m.reported && !m.nextAfterHeal {
		next()
	}
	healed := m.heal == nil
	heal := func() {
		if !healed {
			healed = true
			m.heal(t)
		}
	}
	want := 0
	if m.fault != nil {
		m.fault(t, key)
		defer heal() // also when the trial fails: the next one needs the link
		want = exitLost
	}
	if m.reported {
		expect(t, a.errs, "lost")
		next()
	}
	a.waitCode(t, want)
	heal()
	if m.nextAfterHeal {
		next()
	}
	expect(t, b.out, "ready") // after its first stamp
	if err := b.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	b.waitCode(t, 0)
	stderr := a.stderrText()
	switch {
	case m.fault == nil:
	case (m.reported || m.abrupt) && (!strings.Contains(stderr, "SIGKILL") || strings.Contains(stderr, "SIGTERM")):
		t.Errorf("trial %d: the holder's stderr: %s; want SIGKILL at once, without SIGTERM", i, stderr)
	case !m.reported && !m.abrupt && (!strings.Contains(stderr, "SIGTERM") || !strings.Contains(stderr, "SIGKILL")):
		t.Errorf("trial %d: the holder's stderr: %s; want the SIGTERM warning, then SIGKILL", i, stderr)
	}
	lastA, firstB, err := stampBoundary(file)
	if err != nil {
		t.Errorf("trial %d: %v", i, err)
		return 0, false
	}
	if !lastA.Before(firstB) {
		t.Errorf("trial %d: the holder's command wrote at %v, %v after the next holder's first write; holder's stderr:\n%s",
			i, lastA.Format(time.StampMicro), lastA.Sub(firstB), stderr)
		return 0, false
	}
	t.Logf("trial %d: margin %v; the holder's stderr:\n%s", i, firstB.Sub(lastA), stderr)
	return firstB.Sub(lastA), true
}

// backgroundStamp is a command that starts "child stamp FILE A" in the background,
// waits until it has written its second stamp, and exits 0; stop kills the
// background process if it outlived its dlock run (call it before the test ends).
func backgroundStamp(file string) (cmd []string, stop func()) {
	pidFile := file + ".pid"
	stop = func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// The second stamp, not the first: the child prints "ready" after its first, and
	// dlock run kills the background process as soon as this shell exits, which
	// could fall between the two (the test then never sees "ready").
	return []string{"sh", "-c", `"$0" stamp "$1" A & echo $! >"$1.pid"; while [ ! -s "$1" ] || [ "$(wc -l <"$1")" -lt 2 ]; do :; done; exit 0`, childBin, file}, stop
}

// outputEnds fails the test unless every process holding p's stdout exits.
func outputEnds(t *testing.T, p *proc, what string) {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case _, ok := <-p.out:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal(what)
		}
	}
}

// perLeaseArgs: a per-lease TTL short enough for quick trials; its drift allowance
// (1% + 2ms: 32ms) is the margin a cut-off holder's kill has over the store's expiry.
var perLeaseArgs = []string{"--ttl", "3s"}

func outliveRedis(t *testing.T) outliveTarget {
	r := servertest.NewRedis(t, servers.RedisOptions{})
	px := servertest.Proxy(t, r.Addr())
	return outliveTarget{
		holderURL: "redis://" + px.Addr(), nextURL: "redis://" + r.Addr(), args: perLeaseArgs,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "hung store", fault: func(t *testing.T, _ string) { must(t, r.Pause()) }, heal: func(t *testing.T) { must(t, r.Resume()) }},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) { redisDel(t, r, key) }},
			background,
		},
	}
}

func outliveRedlock(t *testing.T) outliveTarget {
	rs := servertest.RedisMasters(t, 3)
	var ps servers.Proxies
	var via, direct []string
	for _, r := range rs {
		p := servertest.Proxy(t, r.Addr())
		ps = append(ps, p)
		via, direct = append(via, p.Addr()), append(direct, r.Addr())
	}
	return outliveTarget{
		holderURL: "redlock://" + strings.Join(via, ","), nextURL: "redlock://" + strings.Join(direct, ","), args: perLeaseArgs,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { ps.Blackhole() }, heal: func(*testing.T) { ps.Restore() }},
			{name: "hung majority", fault: func(t *testing.T, _ string) { must(t, rs[0].Pause()); must(t, rs[1].Pause()) },
				heal: func(t *testing.T) { must(t, rs[0].Resume()); must(t, rs[1].Resume()) }, nextAfterHeal: true},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) {
				for _, r := range rs {
					redisDel(t, r, key)
				}
			}},
			background,
		},
	}
}

func redisDel(t *testing.T, r *servers.Redis, key string) {
	t.Helper()
	if _, err := r.Do(context.Background(), "DEL", key); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// mysqlURLs returns the URL of scheme (query q) on a fresh database of m, directly
// and through a new proxy, the proxy, and an admin pool of the database.
func mysqlURLs(t *testing.T, m *servers.MySQL, scheme, q string) (direct, via string, px *servers.Proxy, admin *sql.DB) {
	dsn := servertest.NewDatabase(t, m)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px = servertest.Proxy(t, cfg.Addr)
	at := func(addr string) string {
		u := fmt.Sprintf("%s://%s@%s/%s", scheme, cfg.User, addr, cfg.DBName)
		if q != "" {
			u += "?" + q
		}
		return u
	}
	admin, err = sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return at(cfg.Addr), at(px.Addr()), px, admin
}

func outliveMySQL(t *testing.T) outliveTarget {
	direct, via, px, admin := mysqlURLs(t, servertest.MySQL(t), "mysql", "")
	hung := servertest.NewMySQL(t, servers.MySQLOptions{})
	hungURL, _, _, _ := mysqlURLs(t, hung, "mysql", "")
	return outliveTarget{
		holderURL: via, nextURL: direct, args: perLeaseArgs,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) {
				sqlExec(t, admin, "UPDATE "+mysqllock.DefaultTable+" SET expires_at = '1000-01-01' WHERE lock_key = ? AND expires_at > UTC_TIMESTAMP(6)", key)
			}},
			background,
			// On a server of its own, which it pauses.
			{name: "hung store", fault: func(t *testing.T, _ string) { must(t, hung.Pause()) }, heal: func(t *testing.T) { must(t, hung.Resume()) },
				holderURL: hungURL, nextURL: hungURL},
		},
	}
}

func sqlExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%s: %d rows, want 1", query, n)
	}
}

func outliveGetLock(t *testing.T) outliveTarget {
	// wait_timeout=3: a cut-off holder's session is ended by the server 3s after its
	// last statement (checks every second, a third of it).
	const q = "wait_timeout=3"
	direct, via, px, admin := mysqlURLs(t, servertest.MySQL(t), "mysql+getlock", q)
	hung := servertest.NewMySQL(t, servers.MySQLOptions{})
	hungURL, _, _, _ := mysqlURLs(t, hung, "mysql+getlock", q)
	return outliveTarget{
		holderURL: via, nextURL: direct,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "killed connection", reported: true, fault: func(t *testing.T, key string) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var id sql.NullInt64
				if err := admin.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", mysqllock.GetLockName(key)).Scan(&id); err != nil || !id.Valid {
					t.Fatalf("the holder's session: %v %v", id, err)
				}
				if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id.Int64)); err != nil {
					t.Fatal(err)
				}
			}},
			background,
			{name: "hung store", fault: func(t *testing.T, _ string) { must(t, hung.Pause()) }, heal: func(t *testing.T) { must(t, hung.Resume()) },
				holderURL: hungURL, nextURL: hungURL},
		},
	}
}

func outliveZK(t *testing.T) outliveTarget {
	// The server grants at most 3s; the URL asks for 30s: the lease must go by the
	// negotiated timeout.
	z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{MaxSessionTimeout: 3 * time.Second})
	px := servertest.Proxy(t, z.Addrs()[0])
	root := "/outlive"
	admin, _, err := zk.Connect(z.Addrs(), 10*time.Second, zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	const q = "?session_timeout=30s"
	return outliveTarget{
		holderURL: "zk://" + px.Addr() + root + q, nextURL: "zk://" + z.Addrs()[0] + root + q,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) {
				dir := zklock.LockDir(root, key)
				children, _, err := admin.Children(dir)
				if err != nil || len(children) == 0 {
					t.Fatalf("the holder's node in %s: %v %v", dir, children, err)
				}
				for _, c := range children {
					must(t, admin.Delete(dir+"/"+c, -1))
				}
			}},
			background,
		},
	}
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

func outliveEtcd(t *testing.T) outliveTarget {
	e := servertest.Etcd(t)
	px := servertest.Proxy(t, e.Addr())
	prefix := fmt.Sprintf("/outlive-%d", time.Now().UnixNano())
	admin := func(t *testing.T, f func(ctx context.Context, cli *clientv3.Client)) {
		t.Helper()
		cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f(ctx, cli)
	}
	holderKey := func(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) (string, clientv3.LeaseID) {
		resp, err := cli.Get(ctx, etcdlock.QueueName(prefix, key)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("the holder's key: %v (%d keys)", err, len(resp.Kvs))
		}
		return string(resp.Kvs[0].Key), clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	return outliveTarget{
		holderURL: "etcd://" + px.Addr() + prefix, nextURL: "etcd://" + e.Addr() + prefix, args: perLeaseArgs,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) {
				admin(t, func(ctx context.Context, cli *clientv3.Client) {
					k, _ := holderKey(t, ctx, cli, key)
					if _, err := cli.Delete(ctx, k); err != nil {
						t.Fatal(err)
					}
				})
			}},
			{name: "lease revoked", reported: true, fault: func(t *testing.T, key string) {
				admin(t, func(ctx context.Context, cli *clientv3.Client) {
					_, id := holderKey(t, ctx, cli, key)
					if _, err := cli.Revoke(ctx, id); err != nil {
						t.Fatal(err)
					}
				})
			}},
			background,
		},
	}
}

// postgresURLs returns the URL of scheme (query q) on a fresh database of p,
// directly and through a new proxy, the proxy, and an admin pool of the database.
func postgresURLs(t *testing.T, p *servers.Postgres, scheme, q string) (direct, via string, px *servers.Proxy, admin *pgxpool.Pool) {
	db := servertest.PostgresDatabase(t, p)
	px = servertest.Proxy(t, p.Addr())
	at := func(addr string) string {
		u := fmt.Sprintf("%s://postgres@%s/%s", scheme, addr, db)
		if q != "" {
			u += "?" + q
		}
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgxpool.New(ctx, p.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	return at(p.Addr()), at(px.Addr()), px, admin
}

// pgExec runs query on admin and fails the test unless it changed one row.
func pgExec(t *testing.T, admin *pgxpool.Pool, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tag, err := admin.Exec(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("%s: %d rows, want 1", query, tag.RowsAffected())
	}
}

func outlivePostgres(t *testing.T) outliveTarget {
	direct, via, px, admin := postgresURLs(t, servertest.Postgres(t), pglock.Scheme, "")
	hung := servertest.NewPostgres(t, servers.PostgresOptions{})
	hungURL, _, _, _ := postgresURLs(t, hung, pglock.Scheme, "")
	return outliveTarget{
		holderURL: via, nextURL: direct, args: perLeaseArgs,
		modes: []lossMode{
			{name: "partition", fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "deleted", reported: true, fault: func(t *testing.T, key string) {
				pgExec(t, admin, "UPDATE "+pglock.DefaultTable+" SET expires_at = '-infinity' WHERE lock_key = $1 AND expires_at > statement_timestamp()", []byte(key))
			}},
			background,
			// On a server of its own, which it pauses.
			{name: "hung store", fault: func(t *testing.T, _ string) { must(t, hung.Pause()) }, heal: func(t *testing.T) { must(t, hung.Resume()) },
				holderURL: hungURL, nextURL: hungURL},
		},
	}
}

func outliveAdvisory(t *testing.T) outliveTarget {
	// session_timeout=3s: the server ends a cut-off holder's session 3s after its
	// last statement (the client checks every second, a third of it).
	const q = "session_timeout=3s"
	// A ping unanswered for a check interval ends the lease and drops the connection
	// (which may free the lock at once): no deadline to wait for, SIGKILL at once.
	direct, via, px, admin := postgresURLs(t, servertest.Postgres(t), pglock.AdvisoryScheme, q)
	hung := servertest.NewPostgres(t, servers.PostgresOptions{})
	hungURL, _, _, _ := postgresURLs(t, hung, pglock.AdvisoryScheme, q)
	return outliveTarget{
		holderURL: via, nextURL: direct,
		modes: []lossMode{
			{name: "partition", abrupt: true, fault: func(*testing.T, string) { px.Blackhole() }, heal: func(*testing.T) { px.Restore() }},
			{name: "terminated session", reported: true, fault: func(t *testing.T, key string) {
				// The session that holds key's advisory lock: its id is in the key
				// registry; a bigint advisory key is classid (high half), objid (low
				// half), objsubid 1 in pg_locks.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var n int
				err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l, `+pglock.DefaultRegistry+` r
WHERE r.lock_key = $1 AND l.granted AND l.locktype = 'advisory' AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = (r.id >> 32) & 4294967295 AND l.objid::bigint = r.id & 4294967295`, []byte(key)).Scan(&n)
				if err != nil || n != 1 {
					t.Fatalf("terminating the holder's session: %d sessions, %v", n, err)
				}
			}},
			background,
			{name: "hung store", abrupt: true, fault: func(t *testing.T, _ string) { must(t, hung.Pause()) }, heal: func(t *testing.T) { must(t, hung.Resume()) },
				holderURL: hungURL, nextURL: hungURL},
		},
	}
}
