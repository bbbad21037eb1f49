package zklock_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

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

// TestAbandonedWaitLeavesNoNode: a waiter whose ctx ends, and a TryAcquire that
// finds the key held, delete the node they queued.
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
	if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	z := servertest.ZooKeeper(t)
	addr := z.Addrs()[0]
	for _, bad := range []string{
		"zk://" + addr + "/dlock?foo=1",
		"zk://" + addr + "/dlock?session_timeout=soon",
		"zk://" + addr + "/dlock?session_timeout=-1s",
		"zk://user:pw@" + addr + "/dlock",
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
