package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness gives the suite clients that share one private Store, as processes share
// one server.
type harness struct{ store *memlock.Store }

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	return memlock.New(memlock.WithStore(h.store))
}

func (h harness) Capabilities() conformance.Capabilities {
	return conformance.MustDeclare("mem://")
}

func (h harness) Name() string { return "mem" }

func (h harness) DeleteKey(t testing.TB, key string) {
	if !h.store.Delete(key) {
		t.Fatalf("Delete(%q): no live lock to delete", key)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{memlock.NewStore()})
}

// waitFor polls s until n Acquires wait for key (there is no event to wait on).
func waitFor(t *testing.T, s *memlock.Store, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Waiting(key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting for %q, want %d", s.Waiting(key), key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestWaitersInOrder: waiters are granted the lock in the order they came, by
// release and by the holder's expiry; a holder that releases and asks again queues
// behind them, and TryAcquire does not jump the queue. A wait that ends (context,
// Close) leaves the queue.
func TestWaitersInOrder(t *testing.T) {
	s := memlock.NewStore()
	const key = "k"
	holder := memlock.New(memlock.WithStore(s))
	defer holder.Close()
	ls, err := holder.TryAcquire(ctxFor(t, time.Second), key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}

	// A wait cancelled, and one ended by Close, leave no trace in the queue.
	ctx, cancel := context.WithCancel(context.Background())
	gone := memlock.New(memlock.WithStore(s))
	errs := make(chan error, 2)
	go func() { _, err := gone.Acquire(ctx, key); errs <- err }()
	waitFor(t, s, key, 1)
	cancel()
	if err := <-errs; !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	go func() { _, err := gone.Acquire(ctxFor(t, time.Minute), key); errs <- err }()
	waitFor(t, s, key, 1)
	gone.Close()
	if err := <-errs; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("wait ended by Close: %v, want ErrClosed", err)
	}
	waitFor(t, s, key, 0)

	const n = 4
	order := make(chan string, n+1)
	done := make(chan error, n+1)
	acquire := func(l dlock.Locker, who string, ttl time.Duration, release bool) {
		ls, err := l.Acquire(ctxFor(t, time.Minute), key, dlock.WithTTL(ttl))
		if err == nil {
			order <- who
			if release {
				err = ls.Release(ctxFor(t, time.Second))
			}
		}
		done <- err
	}
	var want []string
	for i := range n {
		who := fmt.Sprintf("waiter%d", i)
		l := memlock.New(memlock.WithStore(s))
		defer l.Close()
		// waiter0 keeps the lock: the next one gets it when its 300ms run out.
		go acquire(l, who, 300*time.Millisecond, i != 0)
		waitFor(t, s, key, i+1)
		want = append(want, who)
	}
	if _, err := holder.TryAcquire(ctxFor(t, time.Second), key); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	if err := ls.Release(ctxFor(t, time.Second)); err != nil {
		t.Fatal(err)
	}
	if l, err := holder.TryAcquire(ctxFor(t, time.Second), key); err == nil {
		t.Fatalf("TryAcquire took the lock past %d waiters (token %d)", s.Waiting(key), l.Token())
	}
	go acquire(holder, "holder again", time.Second, true) // behind the waiters
	waitFor(t, s, key, n)                                 // n-1 waiters left, and the holder
	want = append(want, "holder again")
	var got []string
	for range n + 1 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got = append(got, <-order)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("granted in the order %v, want the order of arrival %v", got, want)
	}
}
