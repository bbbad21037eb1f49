package memlock_test

import (
	"context"
	"errors"
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

var _ conformance.QueueInspector = harness{} // memlock declares FIFO

func (h harness) Waiting(t testing.TB, key string) int { return h.store.Waiting(key) }

func (h harness) DeleteKey(t testing.TB, key string) {
	if !h.store.Delete(key) {
		t.Fatalf("Delete(%q): no live lock to delete", key)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{memlock.NewStore()})
}

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
