package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// TestCloseEndsWaits: closing a Locker ends its waiting Acquires with ErrClosed and
// takes them out of the queue (the suite's FIFO property checks the order).
func TestCloseEndsWaits(t *testing.T) {
	s := memlock.NewStore()
	const key = "k"
	holder := memlock.New(memlock.WithStore(s))
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, key); err != nil {
		t.Fatal(err)
	}
	w := memlock.New(memlock.WithStore(s))
	errc := make(chan error, 1)
	go func() { _, err := w.Acquire(ctx, key); errc <- err }()
	for deadline := time.Now().Add(10 * time.Second); s.Waiting(key) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting after 10s, want 1", s.Waiting(key))
		}
		time.Sleep(time.Millisecond) // the queue is polled: no event announces a waiter
	}
	w.Close()
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a wait ended by Close: %v, want ErrClosed", err)
	}
	if n := s.Waiting(key); n != 0 {
		t.Errorf("%d still queued after Close", n)
	}
}

// TestExpiredLocksAreReaped: locks that expire without a release do not stay in the
// Store: 10,000 of them are gone after the next grant a second later.
func TestExpiredLocksAreReaped(t *testing.T) {
	s := memlock.NewStore()
	l := memlock.New(memlock.WithStore(s))
	defer l.Close()
	ctx := context.Background()
	const n = 10000
	for i := range n {
		if _, err := l.TryAcquire(ctx, fmt.Sprint("k", i), dlock.WithTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2100 * time.Millisecond) // the leases expire and the reaping interval passes
	ls, err := l.TryAcquire(ctx, "last", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	if got := s.Size(); got != 1 {
		t.Errorf("Store keeps %d entries after %d leases expired unreleased and one was granted, want 1", got, n)
	}
}
