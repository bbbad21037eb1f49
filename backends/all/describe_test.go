package all_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/backends/all"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) { servertest.Main(m) }

// describeTarget is one backend under TestDescribe, and what its store keeps.
type describeTarget struct {
	name string
	url  func(t *testing.T) string
	// The mutex:
	queue          bool // waiters queue in the store and are shown (else Queue false, no waiters)
	recorded       bool // the holder's WithHolder record is kept
	recordLater    bool // it is written after the grant (the test waits for it)
	waiterRecorded bool // a waiter's record is kept too
	since          bool // Since is known
	ttl            bool // the time left is known (a per-lease TTL)
	tokens         bool // the holder's token is shown
	address        bool // the holder's network address is shown
	// The primitives (false: the backend has none, or its store shows none):
	semaphore, rwlock, election bool
	semLimit                    bool // the semaphore's limit is recorded
	primTokens                  bool // each permit's and shared lease's token is shown
	primRecorded                bool // their holders' records are kept
	primTTL                     bool // their time left is known
	// list: List enumerates the keys (else it says why not, ErrUnsupported).
	list bool
	// unlisted are the suffixes of keys that List cannot name (hashed names).
	unlisted []string
	// setup, if set, runs once the URL is known (e.g. to let the server list its
	// named locks).
	setup func(t *testing.T, url string)
}

func describeTargets() []describeTarget {
	return []describeTarget{
		{name: "mem", url: func(*testing.T) string { return "mem://" },
			queue: true, recorded: true, waiterRecorded: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primRecorded: true, primTTL: true, list: true},
		{name: "redis", url: redisURL(""),
			recorded: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primRecorded: true, primTTL: true, list: true},
		{name: "redis fifo", url: redisURL("?fifo=true"),
			queue: true, recorded: true, waiterRecorded: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primRecorded: true, primTTL: true, list: true},
		{name: "redis+setnx", url: func(t *testing.T) string { return "redis+setnx://" + servertest.Redis(t).Addr() + "?variant=expire" },
			ttl: true, list: true},
		{name: "redlock", url: func(t *testing.T) string {
			var addrs []string
			for _, r := range servertest.RedisMasters(t, 3) {
				addrs = append(addrs, r.Addr())
			}
			return "redlock://" + strings.Join(addrs, ",")
		},
			recorded: true, since: true, ttl: true,
			semaphore: true, primRecorded: true, primTTL: true, list: true},
		{name: "mysql", url: mysqlURL("mysql", ""),
			recorded: true, recordLater: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primTTL: true, list: true},
		{name: "mysql fifo", url: mysqlURL("mysql", "?fifo=true"),
			queue: true, recorded: true, recordLater: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primTTL: true, list: true},
		{name: "etcd", url: func(t *testing.T) string { return "etcd://" + servertest.Etcd(t).Addr() + "/describe" },
			queue: true, recorded: true, waiterRecorded: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primTTL: true, list: true},
		{name: "zookeeper", url: func(t *testing.T) string { return "zk://" + servertest.ZooKeeper(t).Addr() + "/describe" },
			queue: true, recorded: true, waiterRecorded: true, since: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primRecorded: true, list: true},
		{name: "mysql+getlock", url: mysqlURL("mysql+getlock", ""),
			queue: true, address: true, semaphore: true, list: true, unlisted: []string{"/sem"}, setup: lockInfo},
		{name: "postgres", url: postgresURL("postgres", ""),
			recorded: true, recordLater: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primTTL: true, list: true},
		{name: "postgres fifo", url: postgresURL("postgres", "?fifo=true"),
			queue: true, recorded: true, recordLater: true, since: true, ttl: true, tokens: true,
			semaphore: true, rwlock: true, election: true, semLimit: true, primTokens: true, primTTL: true, list: true},
		{name: "postgres+advisory", url: postgresURL("postgres+advisory", ""),
			queue: true, address: true, semaphore: true, rwlock: true, list: true},
	}
}

// postgresURL returns the URL of scheme (with query) on a fresh database of the
// shared PostgreSQL server, as its superuser (the shape of pglock's own tests).
func postgresURL(scheme, query string) func(t *testing.T) string {
	return func(t *testing.T) string {
		p := servertest.Postgres(t)
		return fmt.Sprintf("%s://postgres@%s/%s%s", scheme, p.Addr(), servertest.PostgresDatabase(t, p), query)
	}
}

// mysqlURL returns the URL of scheme (with query) on a fresh database of the shared
// MySQL server.
func mysqlURL(scheme, query string) func(t *testing.T) string {
	return func(t *testing.T) string {
		cfg, err := mysql.ParseDSN(servertest.MySQLDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s://%s@%s/%s%s", scheme, cfg.User, cfg.Addr, cfg.DBName, query)
	}
}

// lockInfo shows that listing GET_LOCK's names needs the server's list of named
// locks, and installs it (MariaDB's METADATA_LOCK_INFO plugin).
func lockInfo(t *testing.T, url string) {
	l := servertest.Open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", servertest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		if _, err := dlock.List(ctx, l, ""); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "metadata_lock_info") {
			t.Errorf("List without a list of named locks: %v, want ErrUnsupported naming the plugin", err)
		}
		if _, err := db.ExecContext(ctx, "INSTALL SONAME 'metadata_lock_info'"); err != nil {
			t.Fatal(err)
		}
	}
}

func redisURL(query string) func(t *testing.T) string {
	return func(t *testing.T) string { return "redis://" + servertest.Redis(t).Addr() + query }
}

// TestDescribe: on every backend, dlock.Describe and dlock.List (through a client of
// their own, as `dlock inspect` is) show the holder of a lock — its token, the
// Holder record it took the lock with, since when, the time left, its address where
// the store keeps what is asked for — its queued waiters in order where the store
// queues them, a semaphore's limit and permits, a read-write lock's shared leases,
// an election's leader and term; a released key shows nothing, and List keeps to its
// prefix.
func TestDescribe(t *testing.T) {
	for _, tg := range describeTargets() {
		t.Run(tg.name, func(t *testing.T) { describeOn(t, tg) })
	}
}

func describeOn(t *testing.T, tg describeTarget) {
	url := tg.url(t)
	if tg.setup != nil {
		tg.setup(t, url)
	}
	a, b, inspector := servertest.Open(t, url), servertest.Open(t, url), servertest.Open(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := fmt.Sprintf("describe-%s-%d", strings.NewReplacer("+", "-").Replace(tg.name), time.Now().UnixNano())
	key := base + "/lock"
	me := dlock.ThisProcess("holder a")

	if got := describe(t, inspector, key); len(got) != 0 {
		t.Fatalf("a key nobody took: %+v, want nothing", got)
	}
	// b takes another key first: a store that names a claim by something b's client
	// made before a's (an etcd lease b keeps for its next lock) shows the queue in
	// its order all the same, not by name.
	warm, err := b.TryAcquire(ctx, base+"/warm", dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ls, err := a.TryAcquire(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithHolder(me))
	if err != nil {
		t.Fatal(err)
	}
	st := one(t, describe(t, inspector, key), dlock.KindLock)
	if tg.recordLater {
		st = waitFor(t, inspector, key, dlock.KindLock, func(s dlock.KeyState) bool { return len(s.Holders) == 1 && s.Holders[0].Holder != nil })
	}
	if len(st.Holders) != 1 {
		t.Fatalf("holders %+v, want 1", st.Holders)
	}
	h := st.Holders[0]
	checkEntry(t, "the holder", tg, h, ls.Token(), me, t0, tg.recorded, tg.tokens, tg.since, tg.ttl)
	if h.Owner == "" {
		t.Errorf("the holder's owner is empty: %+v", h)
	}
	if tg.address && h.Address == "" {
		t.Errorf("the holder's address is empty: %+v", h)
	}
	if st.Queue != tg.queue {
		t.Errorf("Queue = %v, want %v", st.Queue, tg.queue)
	}

	// A waiter, where the store queues it.
	if tg.queue {
		waiter := dlock.ThisProcess("waiter b")
		got := make(chan error, 1)
		go func() {
			wl, err := b.Acquire(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithHolder(waiter))
			if err == nil {
				err = wl.Release(ctx)
			}
			got <- err
		}()
		st = waitFor(t, inspector, key, dlock.KindLock, func(s dlock.KeyState) bool { return len(s.Waiters) == 1 })
		w := st.Waiters[0]
		if hd := st.Holders; len(hd) != 1 || tg.tokens && hd[0].Token != ls.Token() || tg.recorded && (hd[0].Holder == nil || hd[0].Holder.Name != me.Name) {
			t.Errorf("with a waiter, the holders are %+v, want the one of token %d recorded as %q", hd, ls.Token(), me.Name)
		}
		if w.Owner == "" || w.Owner == st.Holders[0].Owner {
			t.Errorf("the waiter's owner %q (the holder's %q)", w.Owner, st.Holders[0].Owner)
		}
		if tg.waiterRecorded && (w.Holder == nil || w.Holder.Name != waiter.Name) {
			t.Errorf("the waiter's record %+v, want %+v", w.Holder, waiter)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	} else if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := released(t, inspector, key); len(got) != 0 {
		t.Errorf("after the release: %+v, want nothing", got)
	}

	held := []string{key}
	var leases []dlock.Lease
	keep := func(l dlock.Lease, err error) dlock.Lease {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
		return l
	}
	relock := keep(a.TryAcquire(ctx, key, dlock.WithTTL(30*time.Second)))
	if tg.semaphore {
		sk := base + "/sem"
		held = append(held, sk)
		var toks []uint64
		for i, l := range []dlock.Locker{a, b} {
			sem, err := dlock.NewSemaphore(l, sk, 3)
			if err != nil {
				t.Fatal(err)
			}
			p := keep(sem.TryAcquire(ctx, dlock.WithTTL(30*time.Second), dlock.WithHolder(dlock.ThisProcess(fmt.Sprint("permit ", i)))))
			toks = append(toks, p.Token())
		}
		st := one(t, describe(t, inspector, sk), dlock.KindSemaphore)
		if len(st.Holders) != 2 {
			t.Fatalf("semaphore holders %+v, want 2", st.Holders)
		}
		if tg.semLimit && st.Limit != 3 {
			t.Errorf("semaphore limit %d, want 3", st.Limit)
		}
		for i, e := range st.Holders {
			if tg.primTokens && e.Token != toks[i] {
				t.Errorf("permit %d: token %d, want %d", i, e.Token, toks[i])
			}
			if tg.primRecorded && (e.Holder == nil || !strings.HasPrefix(e.Holder.Name, "permit ")) {
				t.Errorf("permit %d: record %+v", i, e.Holder)
			}
			if tg.primTTL && (e.TTL <= 0 || e.TTL > 30*time.Second) {
				t.Errorf("permit %d: time left %v, want within (0, 30s]", i, e.TTL)
			}
		}
	}
	if tg.rwlock {
		rk := base + "/rw"
		held = append(held, rk)
		for _, l := range []dlock.Locker{a, b} {
			rw, err := dlock.NewRWMutex(l, rk)
			if err != nil {
				t.Fatal(err)
			}
			keep(rw.TryAcquireShared(ctx, dlock.WithTTL(30*time.Second)))
		}
		st := one(t, describe(t, inspector, rk), dlock.KindRWLock)
		if len(st.Holders) != 2 || !st.Holders[0].Shared || !st.Holders[1].Shared {
			t.Errorf("read-write lock holders %+v, want 2 shared", st.Holders)
		}
	}
	if tg.election {
		ek := base + "/vote"
		held = append(held, ek)
		e, err := dlock.NewElection(a, ek)
		if err != nil {
			t.Fatal(err)
		}
		term := keep(e.Campaign(ctx, "leader a", dlock.WithTTL(30*time.Second)))
		st := one(t, describe(t, inspector, ek), dlock.KindElection)
		if len(st.Holders) != 1 || st.Holders[0].Value != "leader a" || st.Holders[0].Token != term.Token() {
			t.Errorf("election %+v, want leader \"leader a\" with token %d", st.Holders, term.Token())
		}
	}

	// List: the keys under base, and nothing else (a key outside it is held too).
	outside := keep(a.TryAcquire(ctx, "x"+base, dlock.WithTTL(30*time.Second)))
	_ = outside
	listed, err := dlock.List(ctx, inspector, base+"/")
	switch {
	case !tg.list:
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("List: %v, want ErrUnsupported", err)
		}
	case err != nil:
		t.Errorf("List: %v", err)
	default:
		var keys []string
		for _, s := range listed {
			keys = append(keys, s.Key)
		}
		held = slices.DeleteFunc(held, func(k string) bool {
			return slices.ContainsFunc(tg.unlisted, func(suffix string) bool { return strings.HasSuffix(k, suffix) })
		})
		slices.Sort(held)
		if !slices.Equal(keys, held) {
			t.Errorf("List(%q) = %q, want %q", base+"/", keys, held)
		}
		if len(listed) > 0 && tg.tokens && one(t, listed[:1], dlock.KindLock).Holders[0].Token != relock.Token() {
			t.Errorf("List's lock: %+v, want token %d", listed[0], relock.Token())
		}
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("release %s: %v", l.Key(), err)
		}
	}
	for _, k := range held {
		if got := released(t, inspector, k); len(got) != 0 {
			t.Errorf("%s after the releases: %+v, want nothing", k, got)
		}
	}
}

func describe(t *testing.T, l dlock.Locker, key string) []dlock.KeyState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := dlock.Describe(ctx, l, key)
	if err != nil {
		t.Fatalf("Describe(%q): %v", key, err)
	}
	return got
}

// released describes key until the store shows nothing of it, for at most 5s, and
// returns the last description: a release may return before the store is clear
// (Redlock's Unlock succeeds once a majority of masters deleted the key, the
// others' deletes go on in the background), which TestDescribe/redlock saw at once
// after the release ("1 of 3 masters hold a value").
func released(t *testing.T, l dlock.Locker, key string) []dlock.KeyState {
	t.Helper()
	got := describe(t, l, key)
	for deadline := time.Now().Add(5 * time.Second); len(got) != 0 && time.Now().Before(deadline); got = describe(t, l, key) {
		time.Sleep(20 * time.Millisecond)
	}
	return got
}

// one returns the only state in got, which must be of kind.
func one(t *testing.T, got []dlock.KeyState, kind dlock.Kind) dlock.KeyState {
	t.Helper()
	if len(got) != 1 || got[0].Kind != kind {
		t.Fatalf("states %+v, want one %s", got, kind)
	}
	return got[0]
}

// waitFor reads key's state of kind until ok says it is there: nothing announces a
// waiter's arrival in the store to another client, so the store is read again.
func waitFor(t *testing.T, l dlock.Locker, key string, kind dlock.Kind, ok func(dlock.KeyState) bool) dlock.KeyState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range describe(t, l, key) {
			if s.Kind == kind && ok(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %q: not as wanted after 30s: %+v", kind, key, describe(t, l, key))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkEntry checks a holder's entry against the lease and record it was taken with.
func checkEntry(t *testing.T, what string, tg describeTarget, e dlock.Entry, token uint64, rec dlock.Holder, t0 time.Time, recorded, tokens, since, ttl bool) {
	t.Helper()
	if tokens && e.Token != token {
		t.Errorf("%s: token %d, want %d", what, e.Token, token)
	}
	if !tokens && e.Token != 0 {
		t.Errorf("%s: token %d, want 0 (%s keeps none)", what, e.Token, tg.name)
	}
	if recorded {
		if e.Holder == nil || e.Holder.Host != rec.Host || e.Holder.PID != os.Getpid() || e.Holder.Name != rec.Name {
			t.Errorf("%s: record %+v, want %+v", what, e.Holder, rec)
		} else if e.Holder.Since.Before(t0) || e.Holder.Since.After(time.Now()) {
			t.Errorf("%s: record's since %v, want the time of the request (after %v)", what, e.Holder.Since, t0)
		}
	} else if e.Holder != nil {
		t.Errorf("%s: record %+v, want none (%s keeps none)", what, e.Holder, tg.name)
	}
	// A store's clock on this machine: within a second of ours (whole-second or
	// millisecond resolution).
	if since && (e.Since.Before(t0.Add(-time.Second)) || e.Since.After(time.Now().Add(time.Second))) {
		t.Errorf("%s: since %v, want about %v", what, e.Since, t0)
	}
	if ttl && (e.TTL <= 0 || e.TTL > 30*time.Second) {
		t.Errorf("%s: time left %v, want within (0, 30s]", what, e.TTL)
	}
	if !ttl && e.TTL != 0 {
		t.Errorf("%s: time left %v, want 0 (a session lease)", what, e.TTL)
	}
}
