// Package closetest checks, on a backend's real servers, that Locker.Close waits
// for what is in flight: a waiter whose Locker closes leaves no entry in the store's
// queue behind (its clean-up runs before the client closes), and a grant that lands
// while its Locker closes is released, not left to its TTL. The queueing backends'
// tests call Run.
package closetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// Target is a backend under test.
type Target struct {
	// Addr is the server's address (host:port).
	Addr string
	// URL is the URL of a Locker of the backend whose server is at addr (Addr, or a
	// proxy in front of it). The Locker it opens owns its clients: its Close closes
	// them, as a URL opener's does.
	URL func(addr string) string
	// Waiting reports how many Acquires wait in the store's queue for key.
	Waiting func(t testing.TB, key string) int
	// NoGrantCheck skips GrantDuringClose (ZooKeeper: a Locker opened by URL ends its
	// session at Close, which takes every node of its away).
	NoGrantCheck bool
}

// ttl is the TTL of every lease and wait: far longer than any wait of the checks, so
// that what a check finds free was freed, not expired.
const ttl = time.Minute

// Run runs ClosedWaiter and GrantDuringClose as subtests.
func Run(t *testing.T, tg Target) {
	t.Run("ClosedWaiter", func(t *testing.T) { ClosedWaiter(t, tg) })
	if !tg.NoGrantCheck {
		t.Run("GrantDuringClose", func(t *testing.T) { GrantDuringClose(t, tg) })
	}
}

func key(t testing.TB) string {
	return "closetest/" + t.Name() + "/" + time.Now().Format("150405.000000")
}

// waitQueued waits until n Acquires wait for key in the store's queue.
func waitQueued(t testing.TB, tg Target, key string, n int) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); tg.Waiting(t, key) < n; {
		if time.Now().After(end) {
			t.Fatalf("%d waiters in %q's queue after 20s, want %d", tg.Waiting(t, key), key, n)
		}
		time.Sleep(time.Millisecond) // the queue is the store's: nothing signals a change
	}
}

// ClosedWaiter: A holds key; B (opened by URL) waits for it, then C; B's Locker
// closes, and when Close has returned only C is left in the queue; A releases and
// C is granted at once, not after B's TTL.
func ClosedWaiter(t *testing.T, tg Target) {
	a, c := servertest.Open(t, tg.URL(tg.Addr)), servertest.Open(t, tg.URL(tg.Addr))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := key(t)
	la, err := a.TryAcquire(ctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	b, err := dlock.Open(ctx, tg.URL(tg.Addr))
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, k, dlock.WithTTL(ttl))
		bDone <- err
	}()
	waitQueued(t, tg, k, 1)
	type grant struct {
		ls  dlock.Lease
		at  time.Time
		err error
	}
	cDone := make(chan grant, 1)
	go func() {
		ls, err := c.Acquire(ctx, k, dlock.WithTTL(ttl))
		cDone <- grant{ls, time.Now(), err}
	}()
	waitQueued(t, tg, k, 2)
	if err := b.Close(); err != nil {
		t.Errorf("Close of the waiter's Locker: %v", err)
	}
	if err := <-bDone; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("the closed Locker's Acquire: %v, want ErrClosed", err)
	}
	if n := tg.Waiting(t, k); n != 1 {
		t.Errorf("%d waiters in the queue once the waiter's Locker has closed, want 1 (the other waiter): the closed one left its entry", n)
	}
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-cDone:
		if g.err != nil {
			t.Fatalf("the next waiter: %v", g.err)
		}
		t.Logf("the next waiter was granted %v after the release", g.at.Sub(released).Round(time.Millisecond))
		_ = g.ls.Release(ctx)
	case <-time.After(ttl / 3):
		t.Fatalf("the next waiter was not granted within %v of the release: the closed waiter's entry blocks it until its TTL (%v)", ttl/3, ttl)
	}
}

// GrantDuringClose: B (opened by URL through a proxy) holds a lease, and its
// TryAcquire of a free key is on its way, held by the stalled link, when B's Locker
// closes; the link delivers once Close has given the held lease up (it has begun),
// the grant lands during Close, and Close releases it: when Close has returned,
// another client takes the key at once, not after its TTL.
func GrantDuringClose(t *testing.T, tg Target) {
	px := servertest.Proxy(t, tg.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := dlock.Open(ctx, tg.URL(px.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	k := key(t)
	held, err := b.TryAcquire(ctx, k+"/held", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	px.Stall()
	defer px.Restore()
	tried := make(chan error, 1)
	go func() {
		ls, err := b.TryAcquire(ctx, k, dlock.WithTTL(ttl))
		if err == nil {
			err = errors.New("granted a lease")
			_ = ls.Release(ctx)
		}
		tried <- err
	}()
	if !px.WaitStalled(20 * time.Second) {
		t.Fatal("the TryAcquire did not reach the stalled link")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	<-held.Done() // Close has begun: it gives the held lease up (its release is held too)
	px.Restore()
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	err = <-tried
	t.Logf("the TryAcquire under way at Close: %v", err)
	c := servertest.Open(t, tg.URL(tg.Addr))
	lc, err := c.TryAcquire(ctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("the key whose grant landed during Close is still held once Close returned: %v", err)
	}
	_ = lc.Release(ctx)
}
