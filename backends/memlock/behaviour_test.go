package memlock_test

import (
	"context"
	"errors"
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
