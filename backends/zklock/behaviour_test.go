package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/closetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// TestSessionExpiryLosesLock: a holder whose link is cut sees Done close with
// ErrLost — before the ensemble expires its session, so before anyone else is
// granted the lock — and another client then acquires it.
func TestSessionExpiryLosesLock(t *testing.T) {
	z := servertest.ZooKeeper(t)
	const timeout = time.Second
	h := newHarness(t, z.Addrs(), timeout)
	k := uniqueKey(t)

	t.Run("told the negotiated timeout", func(t *testing.T) {
		a, ps := h.open(t)
		b := h.NewLocker(t)
		doneBeforeGrant, err := cutHolder(t, a, ps, b, k)
		if err != nil {
			t.Fatal(err)
		}
		if !doneBeforeGrant {
			t.Error("the cut-off holder's Done was still open when another client was granted the lock")
		}
	})

	// The negative control: a holder told a session timeout longer than the one its
	// connection negotiated (the misuse WithSessionTimeout warns about) still
	// believes it holds the lock when the next client is granted it. This is what
	// the check above would catch if the holder kept its lease too long.
	t.Run("told a longer timeout than negotiated", func(t *testing.T) {
		p := servertest.Proxy(t, z.Addr())
		conn := connect(t, []string{p.Addr()}, timeout)
		a := zklock.New(conn, zklock.WithRoot(h.root), zklock.WithSessionTimeout(30*time.Second))
		t.Cleanup(func() { a.Close() })
		b := h.NewLocker(t)
		doneBeforeGrant, err := cutHolder(t, a, nil, b, k+"/misconfigured", p.Cut)
		if err != nil {
			t.Fatal(err)
		}
		if doneBeforeGrant {
			t.Error("a holder that believes its session lasts 30s ended its lease before the next grant; the check cannot tell")
		}
	})
}

// cutHolder lets a take k, cuts a's links (ps, or cut), lets b acquire k, and
// reports whether a's lease had ended (with ErrLost) before b was granted.
func cutHolder(t *testing.T, a dlock.Locker, ps []*servers.Proxy, b dlock.Locker, k string, cut ...func()) (bool, error) {
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		return false, err
	}
	cutAt := time.Now()
	for _, p := range ps {
		p.Cut()
	}
	for _, c := range cut {
		c()
	}
	lb, err := b.Acquire(ctxFor(t, 30*time.Second), k)
	if err != nil {
		return false, fmt.Errorf("the lock of a holder whose link was cut was never freed: %w", err)
	}
	grantedAt := time.Now()
	var ended bool
	select {
	case <-la.Done():
		ended = true
	default:
	}
	t.Logf("granted to the next client %v after the cut; holder's lease ended before: %v (%v)",
		grantedAt.Sub(cutAt).Round(time.Millisecond), ended, la.Err())
	if ended && !errors.Is(la.Err(), dlock.ErrLost) {
		return false, fmt.Errorf("Err of the cut-off holder: want ErrLost, got %v", la.Err())
	}
	if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
		return false, err
	}
	return ended, nil
}

// eventCounter counts the watch events (not session events) that reach the
// connections it is installed on: what the ensemble sends.
type eventCounter struct{ n atomic.Int64 }

func (c *eventCounter) callback(e zk.Event) {
	if e.Type == zk.EventNodeCreated || e.Type == zk.EventNodeDeleted ||
		e.Type == zk.EventNodeDataChanged || e.Type == zk.EventNodeChildrenChanged {
		c.n.Add(1)
	}
}

// countingConn is a connection whose watch events c counts. Its buffers are small
// so that a hundred of them fit in a test.
func countingConn(t testing.TB, addrs []string, c *eventCounter) *zk.Conn {
	conn, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(quiet{}), zk.WithEventCallback(c.callback),
		zk.WithMaxBufferSize(256<<10), zk.WithMaxConnBufferSize(256<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for e := range events {
		if e.State == zk.StateHasSession {
			break
		}
	}
	return conn
}

// watchCount asks the server (4lw wchs) how many watches are set.
func watchCount(t testing.TB, z interface {
	FourLetter(context.Context, string) (string, error)
}) int {
	s, err := z.FourLetter(ctxFor(t, 5*time.Second), "wchs")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if i := strings.Index(s, "Total watches:"); i >= 0 {
		fmt.Sscanf(s[i+len("Total watches:"):], "%d", &n)
		return n
	}
	t.Fatalf("wchs: %q", s)
	return 0
}

// waitWatches waits until the server holds want watches more than base.
func waitWatches(t testing.TB, z interface {
	FourLetter(context.Context, string) (string, error)
}, want int) {
	deadline := time.Now().Add(30 * time.Second)
	for watchCount(t, z) < want {
		if time.Now().After(deadline) {
			t.Fatalf("the server never held %d watches (has %d)", want, watchCount(t, z))
		}
		time.Sleep(20 * time.Millisecond) // polling the server: it has no signal for "watch set"
	}
}

// TestNoHerd: 100 waiters on one key; every release sends O(1) watch events (the
// successor's watch on its predecessor, the releaser's watch on its own node), not
// one per waiter. A waiter herd (every waiter watching the directory) is counted
// by the same method as the control.
func TestNoHerd(t *testing.T) {
	z := servertest.ZooKeeper(t)
	const waiters = 100
	const root = "/dlock-herd"
	k := uniqueKey(t)
	base := watchCount(t, z)

	var count eventCounter
	holder := zklock.New(countingConn(t, z.Addrs(), &count), zklock.WithRoot(root))
	defer holder.Close()
	lh, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	lockers := make([]dlock.Locker, waiters)
	for i := range lockers {
		lockers[i] = zklock.New(countingConn(t, z.Addrs(), &count), zklock.WithRoot(root))
		defer lockers[i].Close()
	}
	res := conformance.NewResource(true)
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls, err := l.Acquire(ctxFor(t, 2*time.Minute), k)
			if err != nil {
				errs <- err
				return
			}
			who := fmt.Sprintf("waiter%d", i)
			if !res.Enter(who, ls.Token()) {
				errs <- fmt.Errorf("%s: token %d lower than an earlier grant's", who, ls.Token())
			}
			res.Leave(who)
			if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
				errs <- err
			}
		}()
	}
	// Every waiter watches its predecessor and its own node; the holder its own node.
	waitWatches(t, z, base+2*waiters+1)
	count.n.Store(0)
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	releases := waiters + 1
	events := count.n.Load()
	t.Logf("%d releases with %d waiters queued: %d watch events (%.2f per release)", releases, waiters, events, float64(events)/float64(releases))
	if per := float64(events) / float64(releases); per > 3 {
		t.Errorf("%.1f watch events per release with %d waiters: a herd", per, waiters)
	}
	if n, _ := res.Stats(); n != waiters || len(res.Overlaps()) > 0 {
		t.Errorf("%d grants (want %d), overlaps %v", n, waiters, res.Overlaps())
	}

	// Control: the same counting sees a herd where there is one.
	t.Run("herd control", func(t *testing.T) {
		var herd eventCounter
		conn := connect(t, z.Addrs(), 10*time.Second)
		dir := zklock.LockDir(root, uniqueKey(t))
		if _, err := conn.Create(dir, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		defer conn.Delete(dir, -1)
		node, err := conn.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Fatal(err)
		}
		const herdSize = 20
		var got sync.WaitGroup
		for range herdSize {
			c := countingConn(t, z.Addrs(), &herd)
			_, _, ev, err := c.ChildrenW(dir)
			if err != nil {
				t.Fatal(err)
			}
			got.Add(1)
			go func() { defer got.Done(); <-ev }()
		}
		if err := conn.Delete(node, -1); err != nil {
			t.Fatal(err)
		}
		got.Wait()
		if n := herd.n.Load(); n < herdSize {
			t.Errorf("control: %d waiters watching the directory got %d events for one release; the counter misses events", herdSize, n)
		}
	})
}

// TestInteropZkLock: dlock and go-zookeeper's zk.Lock exclude each other on the
// same directory.
func TestInteropZkLock(t *testing.T) {
	z := servertest.ZooKeeper(t)
	h := newHarness(t, z.Addrs(), 2*time.Second)
	k := uniqueKey(t) + "/with/slashes and spaces"
	dir := zklock.LockDir(h.root, k)

	// A zk.Lock holder makes dlock's TryAcquire fail, and its Unlock frees the key.
	conn := connect(t, z.Addrs(), 2*time.Second)
	zl := zk.NewLock(conn, dir, zk.WorldACL(zk.PermAll))
	if err := zl.Lock(); err != nil {
		t.Fatal(err)
	}
	l := h.NewLocker(t)
	if _, err := l.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while zk.Lock holds the directory: want ErrNotAcquired, got %v", err)
	}
	if err := zl.Unlock(); err != nil {
		t.Fatal(err)
	}

	// Mixed contention: three zk.Lock clients and three dlock clients never overlap.
	const each, rounds = 3, 8
	res := conformance.NewResource(false)
	var wg sync.WaitGroup
	var grantsZK, grantsD atomic.Int64
	for i := range each {
		c := connect(t, z.Addrs(), 2*time.Second)
		wg.Add(2)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("zk.Lock%d", i)
			for range rounds {
				zl := zk.NewLock(c, dir, zk.WorldACL(zk.PermAll))
				if err := zl.Lock(); err != nil {
					t.Error(err)
					return
				}
				res.Enter(who, 0)
				time.Sleep(time.Millisecond) // the critical section's work
				res.Leave(who)
				grantsZK.Add(1)
				if err := zl.Unlock(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		dl := h.NewLocker(t)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("dlock%d", i)
			for range rounds {
				ls, err := dl.Acquire(ctxFor(t, time.Minute), k)
				if err != nil {
					t.Error(err)
					return
				}
				res.Enter(who, ls.Token())
				time.Sleep(time.Millisecond) // the critical section's work
				res.Leave(who)
				grantsD.Add(1)
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, o := range res.Overlaps() {
		t.Errorf("overlap between zk.Lock and dlock: %s", o)
	}
	t.Logf("%d zk.Lock grants, %d dlock grants, %d overlaps", grantsZK.Load(), grantsD.Load(), len(res.Overlaps()))
	if grantsZK.Load() != each*rounds || grantsD.Load() != each*rounds {
		t.Errorf("grants: zk.Lock %d, dlock %d; want %d each", grantsZK.Load(), grantsD.Load(), each*rounds)
	}
}

// TestInterruptedRelease: the connection drops while the holder's delete is on its
// way, and the client reconnects within its session, so the node (and the lock)
// outlives the failed request. Release must send the delete again once connected —
// waiting for that within its context, and finishing it in the background when the
// caller stopped waiting — or the lock stays taken for as long as the session
// lives. Before Unlock retried, Release returned the connection error at once and
// the other client here was never granted the lock.
func TestInterruptedRelease(t *testing.T) {
	z := servertest.ZooKeeper(t)
	// Pings every 2s, so the request the proxy holds is the delete; a client
	// disconnected for less than a third of the timeout keeps its leases.
	const timeout = 6 * time.Second
	h := newHarness(t, z.Addrs(), timeout)
	b := h.NewLocker(t)

	// interrupt takes k with a fresh client, holds back its delete in the proxy
	// and drops the connection under it, then lets the client reconnect once
	// Release (with a context of d) has returned or after, whichever it is told.
	interrupt := func(t *testing.T, k string, d time.Duration, restoreFirst bool) (dlock.Lease, error) {
		a, ps := h.open(t)
		ls, err := a.Acquire(ctxFor(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		p := ps[0]
		p.Stall()
		errc := make(chan error, 1)
		go func() { errc <- ls.Release(ctxFor(t, d)) }()
		if !p.WaitStalled(10 * time.Second) {
			t.Fatal("the delete never reached the proxy")
		}
		p.Cut() // the held delete is lost with the connection; reconnects are refused
		if restoreFirst {
			p.Restore()
			return ls, <-errc
		}
		err = <-errc
		p.Restore()
		return ls, err
	}

	t.Run("Release waits for the reconnect", func(t *testing.T) {
		k := uniqueKey(t)
		if _, err := interrupt(t, k, 20*time.Second, true); err != nil {
			t.Fatalf("Release across a dropped connection: %v", err)
		}
		ls, err := b.TryAcquire(ctxFor(t, 10*time.Second), k)
		if err != nil {
			t.Fatalf("another client after the release: %v", err)
		}
		_ = ls.Release(ctxFor(t, 10*time.Second))
	})

	t.Run("a Release given up on finishes in the background", func(t *testing.T) {
		k := uniqueKey(t)
		la, err := interrupt(t, k, 500*time.Millisecond, false)
		if err == nil {
			t.Fatal("Release returned nil while cut off from ZooKeeper")
		}
		// The caller drops the lease, as a careless one would.
		ls, err := b.Acquire(ctxFor(t, 10*time.Second), k)
		if err != nil {
			t.Fatalf("the dropped lease still holds the lock (the session lives on): %v", err)
		}
		_ = ls.Release(ctxFor(t, 10*time.Second))
		select {
		case <-la.Done(): // it ends just after its node is gone
			if !errors.Is(la.Err(), dlock.ErrLost) {
				t.Errorf("the dropped lease ended with %v, want ErrLost", la.Err())
			}
		case <-time.After(10 * time.Second):
			t.Error("the lease whose lock was freed in the background did not end")
		}
	})
}

// TestEmptyDirectoriesGo: a key's lock directory is a container node, which the
// server deletes once its last lock node is gone (TestMain makes the server look
// every 200ms instead of every minute).
func TestEmptyDirectoriesGo(t *testing.T) {
	z := servertest.ZooKeeper(t)
	if z.External() || !fastReaping {
		t.Skip("the server reaps empty containers at its default interval (a minute): external, or a benchmark run")
	}
	h := newHarness(t, z.Addrs(), 2*time.Second)
	k := uniqueKey(t)
	l := h.NewLocker(t)
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	dir := zklock.LockDir(h.root, k)
	if ok, _, err := h.admin.Exists(dir); err != nil || !ok {
		t.Fatalf("lock directory %s while held: exists %v, %v", dir, ok, err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, _, err := h.admin.Exists(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the empty lock directory %s is still there 15s after the release", dir)
		}
		time.Sleep(50 * time.Millisecond) // polling the server, which reaps on its own schedule
	}
	// The key still works after its directory was reaped.
	ls, err = l.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("TryAcquire after the directory was reaped: %v", err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestAbandonedWaitLeavesNoNode: a waiter whose ctx ends, a TryAcquire that
// finds the key held, and a wait cancelled before its create was answered delete
// the node they queued before they return.
func TestAbandonedWaitLeavesNoNode(t *testing.T) {
	z := servertest.ZooKeeper(t)
	h := newHarness(t, z.Addrs(), 2*time.Second)
	k := uniqueKey(t)
	a, b := h.NewLocker(t), h.NewLocker(t)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	dir := zklock.LockDir(h.root, k)
	before, _, err := h.admin.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire until ctx ends: want ErrNotAcquired and DeadlineExceeded, got %v", err)
	}
	after, _, err := h.admin.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("lock directory before the waits %v, after %v: a node was left behind", before, after)
	}

	// A wait cancelled while its create is on its way: the server makes the node
	// after the cancel. The call must not return before it has deleted that node,
	// or the node would take the lock at the holder's release with no one to use
	// it (the Cancellation property saw this as a key still held right after).
	c, ps := h.open(t)
	p := ps[0]
	p.Hold(dir) // the create names the key's directory; pings do not
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	type result struct {
		err error
		at  time.Time
	}
	res := make(chan result, 1)
	go func() {
		_, err := c.Acquire(cctx, k)
		res <- result{err, time.Now()}
	}()
	if !p.WaitStalled(10 * time.Second) {
		t.Fatal("the create never reached the proxy")
	}
	ccancel()
	// The fault: the create's answer comes 100ms after the cancel, inside the
	// bound a cancelled call waits for it.
	time.Sleep(100 * time.Millisecond)
	restored := time.Now()
	p.Restore()
	r := <-res
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Acquire cancelled while its create was on its way: %v, want context.Canceled", r.err)
	}
	if r.at.Before(restored) {
		t.Errorf("the cancelled Acquire returned %v before its create was even delivered: its node is made after it returned", restored.Sub(r.at).Round(time.Millisecond))
	}
	after, _, err = h.admin.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Errorf("lock directory before the cancelled wait %v, when it returned %v: its node was left behind", before, after)
	}

	if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("TryAcquire right after the holder released, behind the cancelled waits: %v", err)
	}
	_ = lb.Release(ctxFor(t, 10*time.Second))
}

func TestOpen(t *testing.T) {
	z := servertest.ZooKeeper(t)
	addr := z.Addrs()[0]
	for _, bad := range []string{
		"zk://" + addr + "/dlock?foo=1",
		"zk://" + addr + "/dlock?session_timeout=soon",
		"zk://" + addr + "/dlock?session_timeout=-1s",
		"zk://user@" + addr + "/dlock-open", // digest needs user:password
		"zk:///dlock",
		"zk://" + addr + "/zookeeper/x",
		"zk://" + addr + "/a//b",
	} {
		if _, err := dlock.Open(ctxFor(t, 10*time.Second), bad); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", bad, err)
		}
	}

	// Without a path, locks live under DefaultRoot; several hosts are comma-separated.
	l, err := dlock.Open(ctxFor(t, 30*time.Second), "zk://"+addr+","+addr+"?session_timeout=3s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k := uniqueKey(t)
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	admin := connect(t, z.Addrs(), 10*time.Second)
	children, _, err := admin.Children(zklock.LockDir(zklock.DefaultRoot, k))
	if err != nil || len(children) != 1 {
		t.Fatalf("lock directory under %s: %v, %v", zklock.DefaultRoot, children, err)
	}
	_, st, err := admin.Get(zklock.LockDir(zklock.DefaultRoot, k) + "/" + children[0])
	if err != nil {
		t.Fatal(err)
	}
	if uint64(st.Czxid) != ls.Token() {
		t.Errorf("Token %d, lock node's czxid %d", ls.Token(), st.Czxid)
	}
	if err := ls.Refresh(ctxFor(t, 10*time.Second), time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Refresh: want ErrUnsupported, got %v", err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	// A ctx that ends before the session is up is an error, and nothing stays open.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dlock.Open(ctx, "zk://"+addr); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled ctx: %v", err)
	}
}

// TestNewPanicsOnBadRoot: a bad WithRoot is a programming error.
func TestNewPanicsOnBadRoot(t *testing.T) {
	z := servertest.ZooKeeper(t)
	conn := connect(t, z.Addrs(), 2*time.Second)
	defer func() {
		if recover() == nil {
			t.Error("New with root \"/\" did not panic")
		}
	}()
	zklock.New(conn, zklock.WithRoot("/"))
}

// TestACLProtectsLockNodes: a lock taken through a zk:// URL with user:password is
// a node with a creator-only ACL in a directory with one: a client without the
// credentials (or with another password) can neither delete the holder's node, nor
// change it, nor plant a child next to it, and the holder keeps its lease. Without
// credentials any client deletes the holder's node, and the holder loses its lease.
func TestACLProtectsLockNodes(t *testing.T) {
	z := servertest.ZooKeeper(t)
	addr := z.Addrs()[0]
	anyone := connect(t, z.Addrs(), 10*time.Second)
	impostor := connectAs(t, z.Addrs(), 10*time.Second, nil, "locker:WRONG-"+secretPassword)
	owner := connectAs(t, z.Addrs(), 10*time.Second, nil, "locker:"+secretPassword) // may list the directories
	holderNode := func(t *testing.T, root, k string) string {
		t.Helper()
		dir := zklock.LockDir(root, k)
		children, _, err := owner.Children(dir)
		if err != nil || len(children) != 1 {
			t.Fatalf("children of %s: %v, %v", dir, children, err)
		}
		return dir + "/" + children[0]
	}
	t.Run("authenticated", func(t *testing.T) {
		root := "/dlock-acl-" + fmt.Sprint(time.Now().UnixNano())
		l := servertest.Open(t, "zk://locker:"+secretPassword+"@"+addr+root)
		k := uniqueKey(t)
		ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		node := holderNode(t, root, k)
		for name, c := range map[string]*zk.Conn{"unauthenticated": anyone, "wrong password": impostor} {
			if err := c.Delete(node, -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s client: Delete of the holder's node: %v, want zk.ErrNoAuth", name, err)
			}
			if _, err := c.Set(node, []byte("x"), -1); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s client: Set on the holder's node: %v, want zk.ErrNoAuth", name, err)
			}
			if _, err := c.Create(zklock.LockDir(root, k)+"/lock-0000000000", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("%s client: planting a node in the lock directory: %v, want zk.ErrNoAuth", name, err)
			}
		}
		if acl, _, err := owner.GetACL(node); err != nil || len(acl) != 1 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "locker:") {
			t.Errorf("the holder's node's ACL: %+v, %v; want one digest entry for locker", acl, err)
		}
		select {
		case <-ls.Done():
			t.Fatalf("the lease ended: %v", ls.Err())
		default:
		}
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Another password is another identity: its locks under this root are refused.
		other := servertest.Open(t, "zk://locker:WRONG-"+secretPassword+"@"+addr+root)
		_, err = other.TryAcquire(ctxFor(t, 10*time.Second), "other-key")
		if !errors.Is(err, zk.ErrNoAuth) || strings.Contains(err.Error(), secretPassword) {
			t.Errorf("TryAcquire with another password under a root it does not own: %v, want zk.ErrNoAuth without the password", err)
		}
	})
	t.Run("unauthenticated", func(t *testing.T) {
		root := "/dlock-noacl-" + fmt.Sprint(time.Now().UnixNano())
		l := servertest.Open(t, "zk://"+addr+root)
		k := uniqueKey(t)
		ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := anyone.Delete(holderNode(t, root, k), -1); err != nil {
			t.Fatalf("deleting a world-writable lock node: %v", err)
		}
		select {
		case <-ls.Done():
			t.Logf("lease ended when another client deleted its node: %v", ls.Err())
		case <-time.After(10 * time.Second):
			t.Fatal("the lease outlived its deleted node by 10s")
		}
	})
}

// TestPlantedNodesIgnored: children of a lock directory that are not lock nodes of
// this protocol — other names, and a persistent node named like the lowest lock
// node — block no one: TryAcquire and Acquire are granted past them, and a waiter
// is granted when the real holder releases.
func TestPlantedNodesIgnored(t *testing.T) {
	root := "/dlock-planted"
	l, other, admin, k := plantScene(t, root)
	dir := zklock.LockDir(root, k)
	if _, err := admin.CreateContainer(dir, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"_c_0123456789abcdef0123456789abcdef-lock-0000000000", "lock-0000000001", "junk", "lock-12", "xlock-0000000002"} {
		if _, err := admin.Create(dir+"/"+name, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(dir+"/"+name, -1) })
	}
	ctx := ctxFor(t, 30*time.Second)
	ls, err := l.TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("TryAcquire past planted nodes: %v", err)
	}
	if _, err := other.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a real holder holds: %v, want ErrNotAcquired", err)
	}
	got := make(chan error, 1)
	go func() {
		ls2, err := other.Acquire(ctx, k)
		if err == nil {
			err = ls2.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // queued behind the holder (a later grant would be as good)
	// Describe shows the real holder and its waiter, not the planted nodes.
	var st []dlock.KeyState
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err = dlock.Describe(ctx, l, k); err != nil {
			t.Fatal(err)
		}
		if len(st) != 1 || len(st[0].Waiters) == 1 || time.Now().After(deadline) {
			break
		}
	}
	if len(st) != 1 || len(st[0].Holders) != 1 || st[0].Holders[0].Token != ls.Token() || len(st[0].Waiters) != 1 ||
		!strings.HasPrefix(st[0].Note, "2 node(s)") {
		t.Errorf("Describe past planted nodes: %+v, want the holder of token %d, one waiter, and a note of 2 planted nodes", st, ls.Token())
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the real holder's release: %v", err)
	}
	ls, err = l.Acquire(ctx, k)
	if err != nil {
		t.Fatalf("Acquire past planted nodes: %v", err)
	}
	_ = ls.Release(ctx)
}

// TestTLSRefusals: a server whose client port speaks TLS only and wants client
// certificates gives no session to a plain-text client, to one without a
// certificate, or to one that trusts another CA.
func TestTLSRefusals(t *testing.T) {
	pki := servertest.PKI(t)
	z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{TLS: pki})
	base := "zk://" + z.Addr() + "/dlock-tls"
	for name, u := range map[string]string{
		"plain text":            base,
		"no client certificate": base + "?tls_ca=" + url.QueryEscape(pki.CAFile) + "&tls_server_name=localhost",
		"another CA":            base + "?" + servertest.PKI(t).URLQuery(),
	} {
		l, err := dlock.Open(ctxFor(t, 2*time.Second), u)
		if err == nil {
			l.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	servertest.Open(t, base+"?"+pki.URLQuery()).Close()
}

// TestTLSVerifiesHostName: each server's certificate is verified against the host
// name the URL gives for it, not the address that name resolves to. A server whose
// certificate carries only the DNS name "localhost" is reached as
// zk://localhost:port (go-zookeeper resolves names before it dials: verified
// against 127.0.0.1, the certificate was refused) and refused as
// zk://127.0.0.1:port; one whose certificate carries only 127.0.0.1 the other way
// round. Neither URL names the server (tls_server_name), so each host is verified
// under its own name, as in an ensemble with a certificate per host.
func TestTLSVerifiesHostName(t *testing.T) {
	for _, c := range []struct{ certFor, good, bad string }{
		{"localhost", "localhost", "127.0.0.1"},
		{"127.0.0.1", "127.0.0.1", "localhost"},
	} {
		t.Run("certificate for "+c.certFor, func(t *testing.T) {
			pki := servertest.PKIFor(t, c.certFor)
			z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{TLS: pki})
			_, port, err := net.SplitHostPort(z.Addr())
			if err != nil {
				t.Fatal(err)
			}
			q := "/dlock-tls-name?tls_ca=" + url.QueryEscape(pki.CAFile) + "&tls_cert=" + url.QueryEscape(pki.ClientCert) +
				"&tls_key=" + url.QueryEscape(pki.ClientKey)
			good := "zk://" + net.JoinHostPort(c.good, port) + q
			l, err := dlock.Open(ctxFor(t, 10*time.Second), good)
			if err != nil {
				t.Fatalf("Open %s (the certificate's own name): %v", good, err)
			}
			ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), uniqueKey(t))
			if err != nil {
				t.Fatalf("TryAcquire over TLS: %v", err)
			}
			_ = ls.Release(ctxFor(t, 10*time.Second))
			l.Close()
			bad := "zk://" + net.JoinHostPort(c.bad, port) + q
			if l, err := dlock.Open(ctxFor(t, 3*time.Second), bad); err == nil {
				l.Close()
				t.Errorf("Open %s succeeded: the certificate does not carry %s", bad, c.bad)
			}
		})
	}
}

// TestInspect: the deployment check reports a clamped session timeout, a
// standalone server and unprotected lock nodes as exposures, and an authenticated
// URL's creator-only ACL and a 3-voter ensemble as protections.
func TestInspect(t *testing.T) {
	z := servertest.ZooKeeper(t) // maxSessionTimeout 60s
	addr := z.Addrs()[0]
	expect := func(t *testing.T, m map[string]spec.Finding, topic string, exposed bool, setting string) {
		t.Helper()
		if f, ok := m[topic]; !ok || f.Exposed != exposed || !strings.Contains(f.Setting, setting) || f.Detail == "" {
			t.Errorf("%s: %+v, want exposed=%v with setting %q", topic, f, exposed, setting)
		}
	}
	m := servertest.Findings(t, "zk://"+addr+"/dlock-inspect?session_timeout=2m")
	expect(t, m, "HolderPause", true, "session_timeout asked 2m0s, granted 1m0s")
	expect(t, m, "QuorumLoss", true, "standalone")
	expect(t, m, "LeaderKill", true, "standalone")
	expect(t, m, "MutualExclusion", true, "world")
	m = servertest.Findings(t, "zk://locker:"+secretPassword+"@"+addr+"/dlock-inspect-acl?session_timeout=3s")
	expect(t, m, "HolderCrash", false, "asked 3s, granted 3s")
	expect(t, m, "MutualExclusion", false, "creator only")
	if !testing.Short() {
		e := servertest.ZKEnsemble(t, 3)
		m = servertest.Findings(t, "zk://"+strings.Join(e.Addrs(), ",")+"/dlock-inspect")
		expect(t, m, "QuorumLoss", false, "ensemble of 3 voters")
		expect(t, m, "LeaderKill", false, "ensemble of 3 voters")
	}
}

// TestPlantedCandidatesIgnored: persistent nodes named like LeaderLatch candidates
// in an election's directory lead nothing: a campaign wins past them, Leader and
// observers report the real leader, never a planted one, and ErrNoLeader when there
// is none.
func TestPlantedCandidatesIgnored(t *testing.T) {
	root := "/dlock-planted-latch"
	l, other, admin, name := plantScene(t, root)
	dir := zklock.ElectionPath(root, name)
	if err := makeAll(admin, dir); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"_c_0123456789abcdef0123456789abcdef-latch-0000000000", "latch-0000000001"} {
		if _, err := admin.Create(dir+"/"+n, []byte("planted"), zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(dir+"/"+n, -1) })
	}
	ctx := ctxFor(t, 30*time.Second)
	e, err := dlock.NewElection(l, name)
	if err != nil {
		t.Fatal(err)
	}
	if ld, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Fatalf("Leader with only planted candidates: %+v, %v; want ErrNoLeader", ld, err)
	}
	term, err := e.TryCampaign(ctx, "real")
	if err != nil {
		t.Fatalf("TryCampaign past planted candidates: %v", err)
	}
	defer term.Release(ctx)
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "real" || ld.Token != term.Token() {
		t.Errorf("Leader: %+v, %v; want the real leader (token %d)", ld, err, term.Token())
	}
	if st, err := dlock.Describe(ctx, other, name); err != nil || len(st) != 1 || len(st[0].Holders) != 1 || len(st[0].Waiters) != 0 ||
		st[0].Holders[0].Value != "real" || st[0].Holders[0].Token != term.Token() {
		t.Errorf("Describe: %+v, %v; want the real leader alone (token %d)", st, err, term.Token())
	}
	oe, err := dlock.NewElection(other, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oe.TryCampaign(ctx, "second"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryCampaign while a real leader leads: %v, want ErrNotAcquired", err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	if ld, ok := <-oe.Observe(octx); !ok || ld.Value != "real" {
		t.Errorf("Observe: %+v (open %v), want the real leader first", ld, ok)
	}
}

// plantScene opens two Lockers on root and a plain connection to plant nodes with,
// and returns them with a key no other test uses.
func plantScene(t *testing.T, root string) (l, other dlock.Locker, admin *zk.Conn, key string) {
	t.Helper()
	z := servertest.ZooKeeper(t)
	l = servertest.Open(t, "zk://"+z.Addrs()[0]+root)
	other = servertest.Open(t, "zk://"+z.Addrs()[0]+root)
	return l, other, connect(t, z.Addrs(), 10*time.Second), uniqueKey(t)
}

// makeAll creates path and its missing parents as persistent nodes.
func makeAll(conn *zk.Conn, path string) error {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if _, err := conn.Create(path[:i], nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// TestPlantedPrimitiveNodesIgnored: persistent nodes planted where semaphores and
// read-write locks keep their nodes — named like dlock's and Curator's lease nodes
// (one with another limit), like read and write nodes, like a lock node queued on
// the semaphore's D/locks, or anything else — take no permit, queue nobody, block
// no reader or writer and are no conflict: a semaphore of limit 1 is granted past
// them (and refuses a second holder), a waiter is granted when the real holder
// releases, and a read-write lock on the same key is granted once the semaphore's
// holders are gone.
func TestPlantedPrimitiveNodesIgnored(t *testing.T) {
	root := "/dlock-planted-prim"
	l, other, admin, k := plantScene(t, root)
	dir := zklock.LockDir(root, k)
	if err := makeAll(admin, dir+"/leases"); err != nil {
		t.Fatal(err)
	}
	plant := func(path string) {
		t.Helper()
		if _, err := admin.Create(path, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(path, -1) })
	}
	for _, n := range []string{"_c_0123456789abcdef0123456789abcdef-limit1-lease-0000000000",
		"_c_0123456789abcdef0123456789abcdef-limit3-lease-0000000001", "lease-0000000002", "junk"} {
		plant(dir + "/leases/" + n)
	}
	for _, n := range []string{"_c_0123456789abcdef0123456789abcdef-__WRIT__0000000000", "__READ__0000000001"} {
		plant(dir + "/" + n)
	}
	if err := makeAll(admin, dir+"/locks"); err != nil { // the semaphore's queue
		t.Fatal(err)
	}
	plant(dir + "/locks/_c_0123456789abcdef0123456789abcdef-lock-0000000000")
	ctx := ctxFor(t, 30*time.Second)
	sem, err := dlock.NewSemaphore(l, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	osem, err := dlock.NewSemaphore(other, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("semaphore TryAcquire past planted nodes: %v", err)
	}
	if _, err := osem.TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("semaphore TryAcquire while the one permit is held: %v, want ErrNotAcquired", err)
	}
	got := make(chan error, 1)
	go func() {
		ls2, err := osem.Acquire(ctx)
		if err == nil {
			err = ls2.Release(ctx)
		}
		got <- err
	}()
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("semaphore Acquire after the real holder's release: %v", err)
	}
	rw, err := dlock.NewRWMutex(l, k)
	if err != nil {
		t.Fatal(err)
	}
	for name, try := range map[string]func(context.Context, ...dlock.Option) (dlock.Lease, error){
		"TryAcquire": rw.TryAcquire, "TryAcquireShared": rw.TryAcquireShared} {
		ls, err := try(ctx)
		if err != nil {
			t.Fatalf("read-write lock %s past planted nodes: %v", name, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReservedRootsRefused: a root with a ".elections" segment (ending in one, or
// inside one) would put its lock directories among the election directories of a
// Locker on a shorter root (the lock "x" under /r/.elections is the election "x"
// under /r, which a Curator LeaderLatch on it also reads): ErrInvalidURL. Names that
// merely look alike are fine.
func TestReservedRootsRefused(t *testing.T) {
	z := servertest.ZooKeeper(t)
	for _, root := range []string{"/r/.elections", "/.elections", "/r/.elections/x"} {
		l, err := dlock.Open(ctxFor(t, 10*time.Second), "zk://"+z.Addrs()[0]+root)
		if !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open with root %s: %v, want ErrInvalidURL", root, err)
		}
		if l != nil {
			l.Close()
		}
	}
	for _, root := range []string{"/r/elections", "/r/.electionsx", "/r/x.elections"} {
		l, err := dlock.Open(ctxFor(t, 10*time.Second), "zk://"+z.Addrs()[0]+root)
		if err != nil {
			t.Errorf("Open with root %s: %v", root, err)
			continue
		}
		l.Close()
	}
}

// TestCloseWaitsForWaiters: a waiter whose Locker closes leaves no node in the queue
// (closetest). A Locker opened by URL ends its session at Close, which takes every
// node of its away: the grant-during-Close check has nothing to show here.
func TestCloseWaitsForWaiters(t *testing.T) {
	z := servertest.ZooKeeper(t)
	h := newHarness(t, z.Addrs(), 10*time.Second)
	closetest.Run(t, closetest.Target{
		Addr:         z.Addrs()[0],
		URL:          func(addr string) string { return "zk://" + addr + h.root },
		Waiting:      h.Waiting,
		NoGrantCheck: true,
	})
}
