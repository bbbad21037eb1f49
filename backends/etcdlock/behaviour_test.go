package etcdlock_test

import (
	"context"
	"errors"
	"fmt"

	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/internal/closetest"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// newMutex returns etcd's own concurrency.Mutex, on a session of its own, on the
// lock name etcdlock uses for key under prefix.
func newMutex(t testing.TB, cli *clientv3.Client, prefix, key string) *concurrency.Mutex {
	t.Helper()
	s, err := concurrency.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return concurrency.NewMutex(s, etcdlock.QueueName(prefix, key))
}

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

func done(ls dlock.Lease) bool {
	select {
	case <-ls.Done():
		return true
	default:
		return false
	}
}

// TestMutexInterop: dlock and etcd's concurrency.Mutex exclude each other on the same
// name, both ways, and a waiter of either kind is woken by the other's release.
func TestMutexInterop(t *testing.T) {
	e := servertest.Etcd(t)
	prefix := "/interop-" + randHex(4)
	dl := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer dl.Close()
	admin := newClient(t, e.Endpoints())
	k := "orders-42"
	mu := newMutex(t, newClient(t, e.Endpoints()), prefix, k)

	// dlock holds: the Mutex cannot.
	ls, err := dl.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	if err := mu.TryLock(ctxFor(t, 10*time.Second)); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while dlock holds: want ErrLocked, got %v", err)
	}
	// A Mutex waiter is granted once dlock releases.
	got := make(chan error, 1)
	go func() {
		err := mu.Lock(ctxFor(t, 20*time.Second))
		if err == nil {
			err = mu.Unlock(ctxFor(t, 10*time.Second))
		}
		got <- err
	}()
	waitQueued(t, admin, prefix, k, 2)
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Mutex.Lock after dlock's release: %v", err)
	}

	// The Mutex holds: dlock cannot, and a dlock waiter is granted once it unlocks.
	if err := mu.TryLock(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := dl.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock TryAcquire while the Mutex holds: want ErrNotAcquired, got %v", err)
	}
	type result struct {
		ls  dlock.Lease
		err error
	}
	granted := make(chan result, 1)
	go func() {
		ls, err := dl.Acquire(ctxFor(t, 20*time.Second), k)
		granted <- result{ls, err}
	}()
	waitQueued(t, admin, prefix, k, 2)
	select {
	case r := <-granted:
		t.Fatalf("dlock Acquire returned while the Mutex holds: %v", r.err)
	default:
	}
	if err := mu.Unlock(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-granted
	if r.err != nil {
		t.Fatalf("dlock Acquire after the Mutex's unlock: %v", r.err)
	}
	if err := r.ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// waitQueued waits until key's queue holds n keys (a holder and waiters).
func waitQueued(t testing.TB, admin *clientv3.Client, prefix, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := admin.Get(ctxFor(t, 5*time.Second), etcdlock.QueueName(prefix, key)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count >= n {
			return
		}
		time.Sleep(5 * time.Millisecond) // the store has no signal for "a waiter queued": poll it
	}
	t.Fatalf("%q: fewer than %d keys queued after 10s", key, n)
}

// TestFenceRejectsStaleHolder: a transaction guarded by Fence commits for the holder
// and is refused, by etcd, for a holder whose lease expired and whose lock was granted
// again, though that holder still has its Lease in hand.
func TestFenceRejectsStaleHolder(t *testing.T) {
	e := servertest.Etcd(t)
	prefix := "/fence-" + randHex(4)
	cli := newClient(t, e.Endpoints())
	a := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer a.Close()
	b := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer b.Close()
	k, data := "account/7", prefix+"/data/account/7"
	write := func(l *etcdlock.Locker, ls dlock.Lease, v string) bool {
		t.Helper()
		cmp, err := l.Fence(ls)
		if errors.Is(err, dlock.ErrNotHeld) && ls.Err() != nil {
			return false // a lease the Locker has seen lost gets no comparison: refused here
		}
		if err != nil {
			t.Fatalf("Fence: %v", err)
		}
		resp, err := cli.Txn(ctxFor(t, 10*time.Second)).If(cmp).Then(clientv3.OpPut(data, v)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}

	la, err := a.Acquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !write(a, la, "a") {
		t.Fatal("the holder's fenced write was refused")
	}
	// a stops refreshing (a pause, a partition): its lease ends, b is granted.
	lb, err := b.Acquire(ctxFor(t, 20*time.Second), k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !done(la) {
		t.Fatal("b was granted the lock while a's lease had not ended")
	}
	if write(a, la, "stale") {
		t.Fatal("the fenced write of a holder whose lock was granted again was accepted")
	}
	if !write(b, lb, "b") {
		t.Fatal("the new holder's fenced write was refused")
	}
	resp, err := cli.Get(ctxFor(t, 10*time.Second), data)
	if err != nil {
		t.Fatal(err)
	}
	if v := string(resp.Kvs[0].Value); v != "b" {
		t.Fatalf("data = %q, want %q", v, "b")
	}
	if _, err := b.Fence(la); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Fence of another Locker's lease: want ErrNotHeld, got %v", err)
	}
	if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Fence(lb); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Fence after Release: want ErrNotHeld, got %v", err)
	}
}

// TestLostBeforeRegrant: a holder whose lease the server ends is told (Done, ErrLost)
// before another client can be granted the lock: when its link is cut (auto-renewal
// fails until the local deadline, which comes before the server's expiry), and when
// its lease is revoked (the watch on its own key reports the loss at once).
func TestLostBeforeRegrant(t *testing.T) {
	e := servertest.Etcd(t)
	prefix := "/lost-" + randHex(4)
	admin := newClient(t, e.Endpoints())
	b := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer b.Close()

	t.Run("LinkCut", func(t *testing.T) {
		p := servertest.Proxy(t, e.Addr())
		a := etcdlock.New(newClient(t, []string{p.Addr()}), etcdlock.WithPrefix(prefix))
		defer a.Close()
		k := "cut"
		la, err := a.Acquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(2*time.Second), dlock.WithAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		p.Cut()
		cut := time.Now()
		lb, err := b.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatalf("the lock of a cut-off holder was never freed: %v", err)
		}
		granted := time.Since(cut)
		if !done(la) {
			t.Fatalf("b was granted %v after the cut while a's lease had not ended", granted)
		}
		if !errors.Is(la.Err(), dlock.ErrLost) {
			t.Fatalf("Err of the cut-off auto-renewed lease: want ErrLost, got %v", la.Err())
		}
		t.Logf("granted to b %v after the cut (ttl 2s); a ended with %v", granted.Round(time.Millisecond), la.Err())
		if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("LeaseRevoked", func(t *testing.T) {
		a := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
		defer a.Close()
		k := "revoked"
		la, err := a.Acquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := admin.Get(ctxFor(t, 10*time.Second), etcdlock.QueueName(prefix, k)+"/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("the holder's key: %v %v", resp, err)
		}
		if _, err := admin.Revoke(ctxFor(t, 10*time.Second), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-la.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the holder of a revoked lease was not told within 10s")
		}
		if !errors.Is(la.Err(), dlock.ErrLost) {
			t.Fatalf("Err after the lease was revoked: want ErrLost, got %v", la.Err())
		}
		if err := la.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Release after the loss: want ErrNotHeld, got %v", err)
		}
	})
}

// TestOpen: the etcd:// scheme opens a Locker on the listed endpoints under the path's
// prefix, and rejects what it does not understand.
func TestOpen(t *testing.T) {
	e := servertest.Etcd(t)
	admin := newClient(t, e.Endpoints())
	prefix := "/open-" + randHex(4)
	l, err := dlock.Open(ctxFor(t, 10*time.Second), "etcd://"+e.Addr()+","+e.Addr()+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), "a/b")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := admin.Get(ctxFor(t, 10*time.Second), prefix+"/a%2Fb/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != int64(ls.Token()) {
		t.Fatalf("want one key under %s/a%%2Fb/ with create revision %d, got %v (%v)", prefix, ls.Token(), resp, err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"etcd://" + e.Addr() + "/p?ttl=3", "etcd:///p", "etcd://" + e.Addr() + ",/p"} {
		if l, err := dlock.Open(ctxFor(t, 10*time.Second), bad); !errors.Is(err, dlock.ErrInvalidURL) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", bad, err)
		}
	}
}

// TestWaitLongerThanTTL: a waiter queued for several times its TTL (its lease kept
// alive while it waits) is granted a lease valid for its whole TTL from the grant,
// not one that expired while it waited.
func TestWaitLongerThanTTL(t *testing.T) {
	e := servertest.Etcd(t)
	prefix := "/longwait-" + randHex(4)
	a := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer a.Close()
	b := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer b.Close()
	admin := newClient(t, e.Endpoints())
	const ttl = 2 * time.Second
	// The holder renews every ttl/3; under -race on a loaded machine a renewal of an
	// embedded etcd can take hundreds of ms, so the TTL is not the minimum.
	held, err := a.TryAcquire(ctxFor(t, 10*time.Second), "k", dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var lb dlock.Lease
	go func() {
		var err error
		lb, err = b.Acquire(ctxFor(t, 30*time.Second), "k", dlock.WithTTL(ttl))
		got <- err
	}()
	waitQueued(t, admin, prefix, "k", 2)
	time.Sleep(3 * ttl) // the waiter waits three of its TTLs
	if err := held.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter queued for 3 TTLs was not granted: %v", err)
	}
	grantedAt := time.Now()
	if done(lb) {
		t.Fatalf("the waiter's lease ended at once: %v", lb.Err())
	}
	<-lb.Done()
	if held := time.Since(grantedAt); held < ttl/2 {
		t.Errorf("the waiter's lease lasted %v after the grant, want about its ttl %v", held, ttl)
	}
	if !errors.Is(lb.Err(), dlock.ErrExpired) {
		t.Errorf("Err = %v, want ErrExpired", lb.Err())
	}
}

// TestTablesShrink: a Locker's tables do not grow with what it no longer holds: a
// lease lost behind its holder's back leaves the held-lock table at once (before
// its Done closes), and the idle-lease pool keeps at most 16 TTLs and drops leases
// the server may have expired.
func TestTablesShrink(t *testing.T) {
	e := servertest.Etcd(t)
	prefix := "/shrink-" + randHex(4)
	admin := newClient(t, e.Endpoints())
	l := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix))
	defer l.Close()

	ls, err := l.Acquire(ctxFor(t, 10*time.Second), "lost", dlock.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past lossWatchDelay (50ms): the key is watched for loss
	if _, err := admin.Delete(ctxFor(t, 10*time.Second), etcdlock.QueueName(prefix, "lost"), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease whose key was deleted did not end")
	}
	if n := etcdlock.HeldLocks(l); n != 0 {
		t.Errorf("%d grants still in the held table after the only lease was lost", n)
	}

	for secs := 1; secs <= 20; secs++ {
		ls, err := l.Acquire(ctxFor(t, 10*time.Second), fmt.Sprint("ttl", secs), dlock.WithTTL(time.Duration(secs)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if n := etcdlock.IdleLeaseBuckets(l); n > 16 {
		t.Errorf("%d TTL buckets of idle leases after 20 TTLs, want at most 16", n)
	}
	// The 1s TTL's lease lasts 2s: once the server may have expired it, the next
	// return to the pool drops its bucket.
	time.Sleep(2500 * time.Millisecond)
	before := etcdlock.IdleLeaseBuckets(l)
	ls, err = l.Acquire(ctxFor(t, 10*time.Second), "again", dlock.WithTTL(2*time.Second)) // a bucket it keeps
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if after := etcdlock.IdleLeaseBuckets(l); after >= before {
		t.Errorf("idle TTL buckets %d before and %d after the short leases expired: the pool did not shrink", before, after)
	}
}

// TestTLSAndAuthRefusals: a member with authentication enabled refuses a wrong
// password, no credentials, and a user whose role does not cover the prefix; a
// member that requires TLS and client certificates refuses a client without either
// or one that does not trust its CA. No error shows the password.
func TestTLSAndAuthRefusals(t *testing.T) {
	prefix := "/refusals-" + randHex(4)
	plain := servertest.NewEtcd(t, servers.EtcdOptions{})
	addLockUser(t, plain, prefix)
	pki := servertest.PKI(t)
	tlsOnly := servertest.NewEtcd(t, servers.EtcdOptions{TLS: pki})
	ctx := ctxFor(t, time.Minute)
	good := "etcd://locker:" + secretPassword + "@" + plain.Addr() + prefix
	l, err := dlock.Open(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := l.TryAcquire(ctx, "k"); err != nil {
		t.Errorf("the lock user on its prefix: %v", err)
	} else {
		_ = ls.Release(ctx)
	}
	l.Close()
	other := servertest.PKI(t).URLQuery() // another CA, and a client certificate of it
	for _, c := range []struct{ name, url, want string }{
		{"wrong password", "etcd://locker:WRONG-" + secretPassword + "@" + plain.Addr() + prefix, "authentication failed"},
		{"no user", "etcd://" + plain.Addr() + prefix, "user name is empty"},
		{"outside the prefix", "etcd://locker:" + secretPassword + "@" + plain.Addr() + "/elsewhere", "permission denied"},
		{"plain text to TLS", "etcd://" + tlsOnly.Addr() + prefix, ""},
		{"no client certificate", "etcd://" + tlsOnly.Addr() + prefix + "?tls_ca=" + url.QueryEscape(pki.CAFile), ""},
		{"another CA", "etcd://" + tlsOnly.Addr() + prefix + "?" + other, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cctx := ctxFor(t, 2*time.Second)
			l, err := dlock.Open(cctx, c.url)
			if err == nil {
				_, err = l.TryAcquire(cctx, "k")
				l.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.Is(err, dlock.ErrInvalidURL) {
				t.Errorf("want a refusal saying %q, got %v", c.want, err)
			}
			if err != nil && strings.Contains(err.Error(), secretPassword) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestInspect: the deployment check reports a single member as exposed to the loss
// of its only server, and a healthy 3-member cluster as tolerating one.
func TestInspect(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		m := servertest.Findings(t, "etcd://"+servertest.Etcd(t).Addr())
		if f := m[string(spec.QuorumLoss)]; !f.Exposed || !strings.Contains(f.Setting, "members=1 healthy=1") {
			t.Errorf("QuorumLoss: %+v", f)
		}
		if f := m[string(spec.LeaderKill)]; !f.Exposed {
			t.Errorf("LeaderKill: %+v", f)
		}
		if f := m[string(spec.ClockJump)]; f.Exposed {
			t.Errorf("ClockJump: %+v", f)
		}
	})
	t.Run("secure", func(t *testing.T) {
		e, pki := secureEtcd(t, "/inspect")
		m := servertest.Findings(t, "etcd://locker:"+secretPassword+"@"+e.Addr()+"/inspect?"+pki.URLQuery())
		if f := m[string(spec.QuorumLoss)]; !f.Exposed || !strings.Contains(f.Setting, "members=1 healthy=1") {
			t.Errorf("QuorumLoss: %+v", f)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := servertest.EtcdCluster(t, 3)
		m := servertest.Findings(t, "etcd://"+strings.Join(c.Endpoints(), ","))
		if f := m[string(spec.QuorumLoss)]; f.Exposed || !strings.Contains(f.Setting, "members=3 healthy=3") {
			t.Errorf("QuorumLoss: %+v", f)
		}
		if f := m[string(spec.LeaderKill)]; f.Exposed {
			t.Errorf("LeaderKill: %+v", f)
		}
		// A follower, not the leader: the cluster then stops quickly at the end (a
		// stopping leader first hands over to a live follower).
		leader, err := c.Leader(ctxFor(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The dead member's endpoint first: the opener must not stop at it.
		var eps []string
		killed := false
		for _, m := range c.Members {
			if m == leader || killed {
				eps = append(eps, m.Addr())
				continue
			}
			if err := m.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
			eps = append([]string{m.Addr()}, eps...)
		}
		m = servertest.Findings(t, "etcd://"+strings.Join(eps, ","))
		if f := m[string(spec.QuorumLoss)]; !f.Exposed || !strings.Contains(f.Setting, "healthy=2") || !strings.Contains(f.Setting, "does not answer") {
			t.Errorf("QuorumLoss with a member down: %+v", f)
		}
	})
}

// TestNestedPrefixesApart: a Locker whose prefix lies inside another's key range
// (/p and /p/a: the queue of /p's key "a" is /p/a/, where /p/a keeps all it
// holds) does not block the other's keys. While /p/a holds a lock, a semaphore
// permit and an election term, /p's key "a" is granted by TryAcquire, Acquire and
// TryAcquireAll, and still excludes another /p client; /p/a's holders go on.
func TestNestedPrefixesApart(t *testing.T) {
	e := servertest.Etcd(t)
	outer := "/dlock-nest-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	a := servertest.Open(t, "etcd://"+e.Addr()+outer)
	a2 := servertest.Open(t, "etcd://"+e.Addr()+outer)
	b := servertest.Open(t, "etcd://"+e.Addr()+outer+"/a")
	ctx := ctxFor(t, 30*time.Second)
	held, err := b.TryAcquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := dlock.NewSemaphore(b, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	permit, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	el, err := dlock.NewElection(b, "e")
	if err != nil {
		t.Fatal(err)
	}
	term, err := el.TryCampaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	ls, err := a.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatalf("TryAcquire(a) under %s while %s/a holds keys: %v", outer, outer, err)
	}
	// Describe and List of the outer prefix show its own holder of "a", none of
	// the nested prefix's keys.
	desc, err := dlock.Describe(ctx, a, "a")
	if err != nil {
		t.Fatal(err)
	}
	list, err := dlock.List(ctx, a, "")
	if err != nil {
		t.Fatal(err)
	}
	for what, states := range map[string][]dlock.KeyState{"Describe(a)": desc, "List": list} {
		if len(states) != 1 || states[0].Key != "a" || len(states[0].Holders) != 1 || len(states[0].Waiters) != 0 {
			t.Errorf("%s under %s while %s/a holds keys: %+v, want the one holder of a", what, outer, outer, states)
		}
	}
	if _, err := a2.TryAcquire(ctx, "a"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a second client's TryAcquire(a) while the first holds it: %v, want ErrNotAcquired", err)
	}
	release := func(ls dlock.Lease) {
		t.Helper()
		if err := ls.Release(ctx); err != nil {
			t.Errorf("Release(%s): %v", ls.Key(), err)
		}
	}
	release(ls)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ls, err = a.Acquire(wctx, "a")
	cancel()
	if err != nil {
		t.Fatalf("Acquire(a) under %s while %s/a holds keys: %v", outer, outer, err)
	}
	release(ls)
	set, err := dlock.TryAcquireAll(ctx, a, []string{"a", "z"})
	if err != nil {
		t.Fatalf("TryAcquireAll(a, z) under %s while %s/a holds keys: %v", outer, outer, err)
	}
	release(set)
	for _, ls := range []dlock.Lease{held, permit, term} {
		select {
		case <-ls.Done():
			t.Errorf("%s's lease on %s ended: %v", outer+"/a", ls.Key(), ls.Err())
		default:
		}
		release(ls)
	}
}

// TestReservedPrefixesRefused: a prefix with a segment that names the namespaces of
// primitives ("!primitives") or elections (";election") — ending in one, or inside
// one — would share queues with another Locker's semaphores or elections (the mutex
// "s" under /p/!primitives is the semaphore "s" under /p): ErrInvalidURL.
func TestReservedPrefixesRefused(t *testing.T) {
	e := servertest.Etcd(t)
	for _, p := range []string{"/p/!primitives", "/p/;election", "/p/!primitives/x", "/;election/x", "/!primitives"} {
		l, err := dlock.Open(ctxFor(t, 10*time.Second), "etcd://"+e.Addr()+p)
		if !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open with prefix %s: %v, want ErrInvalidURL", p, err)
		}
		if l != nil {
			l.Close()
		}
	}
	for _, p := range []string{"/p/primitives", "/p/election", "/p/x!primitives", "/p/!primitivesx"} {
		l, err := dlock.Open(ctxFor(t, 10*time.Second), "etcd://"+e.Addr()+p)
		if err != nil {
			t.Errorf("Open with prefix %s: %v", p, err)
			continue
		}
		l.Close()
	}
}

// TestCloseWaitsForWaiters: a waiter whose Locker closes takes its key out of the
// queue (revokes its lease) before the client closes, and a grant that lands during
// Close is released (closetest).
func TestCloseWaitsForWaiters(t *testing.T) {
	e := servertest.Etcd(t)
	h := newHarness(t, e.Endpoints())
	closetest.Run(t, closetest.Target{
		Addr:    e.Addr(),
		URL:     func(addr string) string { return "etcd://" + addr + h.prefix },
		Waiting: h.Waiting,
	})
}
