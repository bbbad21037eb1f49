package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/driver"
)

// mutexOnly is a driver without primitives.
type mutexOnly struct{}

func (mutexOnly) TryLock(context.Context, string, time.Duration) (driver.Lock, error) {
	return nil, driver.Busy(0)
}
func (mutexOnly) Close() error { return nil }

// notMade is a Locker dlock.New did not make (and that wraps none).
type notMade struct{ dlock.Locker }

func TestPrimitiveConstructors(t *testing.T) {
	mem := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer mem.Close()
	plain := dlock.New(mutexOnly{}, driver.Info{Name: "plain"})
	defer plain.Close()
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"semaphore on a backend without", second(dlock.NewSemaphore(plain, "k", 2)), errors.ErrUnsupported},
		{"read-write lock on a backend without", second(dlock.NewRWMutex(plain, "k")), errors.ErrUnsupported},
		{"semaphore on a foreign Locker", second(dlock.NewSemaphore(notMade{mem}, "k", 2)), errors.ErrUnsupported},
		{"limit 0", second(dlock.NewSemaphore(mem, "k", 0)), dlock.ErrInvalidLimit},
		{"limit above MaxLimit", second(dlock.NewSemaphore(mem, "k", dlock.MaxLimit+1)), dlock.ErrInvalidLimit},
		{"semaphore with an empty key", second(dlock.NewSemaphore(mem, "", 2)), dlock.ErrInvalidKey},
		{"read-write lock with an invalid key", second(dlock.NewRWMutex(mem, "\xff")), dlock.ErrInvalidKey},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	if _, err := dlock.NewSemaphore(mem, "k", dlock.MaxLimit); err != nil {
		t.Errorf("limit MaxLimit: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestPrimitivesUnderInstrument: a Locker wrapped by Instrument gives primitives
// whose calls and leases its Observer sees.
func TestPrimitivesUnderInstrument(t *testing.T) {
	var mu sync.Mutex
	var kinds []dlock.EventKind
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		mu.Lock()
		kinds = append(kinds, e.Kind)
		mu.Unlock()
	})
	l := dlock.Instrument(memlock.New(memlock.WithStore(memlock.NewStore())), obs)
	defer l.Close()
	ctx := context.Background()
	sem, err := dlock.NewSemaphore(l, "k", 2)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := dlock.NewRWMutex(l, "k2")
	if err != nil {
		t.Fatal(err)
	}
	for _, acquire := range []func(context.Context, ...dlock.Option) (dlock.Lease, error){sem.Acquire, rw.AcquireShared, rw.TryAcquire} {
		ls, err := acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []dlock.EventKind{dlock.EventAcquire, dlock.EventEnd, dlock.EventAcquire, dlock.EventEnd, dlock.EventAcquire, dlock.EventEnd}
	if len(kinds) != len(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("events %v, want %v", kinds, want)
		}
	}
}
