package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/driver"
)

// hangStore is a lock store that stops answering on request: once hung, Refresh
// and Unlock block until their context ends (as a SIGSTOPped server does), and it
// tells the test when a refresh has started.
type hangStore struct {
	hung      atomic.Bool
	refreshed chan struct{} // a refresh started while hung
}

func newHangStore() *hangStore { return &hangStore{refreshed: make(chan struct{}, 16)} }

func (s *hangStore) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return hangLock{s}, nil
}
func (s *hangStore) Close() error { return nil }

type hangLock struct{ s *hangStore }

func (l hangLock) Token() uint64 { return 1 }
func (l hangLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if !l.s.hung.Load() {
		return nil
	}
	select {
	case l.s.refreshed <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (l hangLock) Unlock(ctx context.Context) error {
	if !l.s.hung.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestReleaseDuringHungRenewal: while an auto-renewal hangs on a store that stopped
// answering, Release returns within its own context (it does not wait for the
// renewal), Done closes by the validity deadline, and Close gives up the release
// after 1s.
func TestReleaseDuringHungRenewal(t *testing.T) {
	s := newHangStore()
	l := dlock.New(s, driver.Info{Name: "hang"})
	const ttl = 900 * time.Millisecond
	start := time.Now()
	ls, err := l.TryAcquire(context.Background(), "k", dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	s.hung.Store(true)
	select {
	case <-s.refreshed: // the renewal at TTL/3 is in flight, and hangs
	case <-time.After(ttl):
		t.Fatal("no renewal started within the TTL")
	}

	const bound = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t0 := time.Now()
	err = ls.Release(ctx)
	took := time.Since(t0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release on a hung store: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took > bound+100*time.Millisecond {
		t.Errorf("Release with a %v context took %v while a renewal hung", bound, took)
	}

	select {
	case <-ls.Done():
		if at := time.Since(start); at > ttl+50*time.Millisecond {
			t.Errorf("Done closed %v after the grant, past the %v TTL", at, ttl)
		}
		if !errors.Is(ls.Err(), dlock.ErrLost) {
			t.Errorf("Err after the hung renewals: %v, want ErrLost", ls.Err())
		}
	case <-time.After(2 * ttl):
		t.Fatalf("Done still open %v after the grant (TTL %v)", time.Since(start), ttl)
	}

	// Close with a lease whose release hangs: bounded by its 2s.
	ls2, err := l.TryAcquire(context.Background(), "k2", dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(t0); took > time.Second+200*time.Millisecond {
		t.Errorf("Close took %v with a hung store, want at most its 1s bound for releases", took)
	}
	if !errors.Is(ls2.Err(), dlock.ErrClosed) {
		t.Errorf("a lease ended by Close: %v, want ErrClosed", ls2.Err())
	}
}

// TestReleaseAfterDeadline: Release called after the lease's validity deadline
// returns ErrNotHeld, even when it comes before the deadline timer has run (many
// leases expiring at once make the timers late).
func TestReleaseAfterDeadline(t *testing.T) {
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	const n, ttl = 400, 200 * time.Millisecond
	var wg sync.WaitGroup
	var nils atomic.Int64
	for i := range n {
		wg.Go(func() {
			ls, err := l.TryAcquire(context.Background(), fmt.Sprint("k", i), dlock.WithTTL(ttl))
			if err != nil {
				t.Error(err)
				return
			}
			// The deadline is TTL − drift from the start of the request: 50µs past
			// that, counted from its end, is past the deadline — and often before the
			// deadline timer has run.
			sleepUntil(time.Now().Add(ttl - driver.DefaultDrift(ttl) + 50*time.Microsecond))
			if err := ls.Release(context.Background()); err == nil {
				nils.Add(1)
			} else if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Release after the deadline: %v, want ErrNotHeld", err)
			}
		})
	}
	wg.Wait()
	if k := nils.Load(); k > 0 {
		t.Errorf("%d of %d Releases after the validity deadline returned nil", k, n)
	}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestZeroRetryDelayIsClamped: a retry strategy that asks for no delay waits 1ms
// between attempts instead of spinning on the store.
func TestZeroRetryDelayIsClamped(t *testing.T) {
	s := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(s)), memlock.New(memlock.WithStore(s))
	defer a.Close()
	defer b.Close()
	if _, err := a.TryAcquire(context.Background(), "k", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var attempts int
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventAcquire {
			attempts = e.Attempts
		}
	})
	const d = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if _, err := b.Acquire(ctx, "k", dlock.WithRetry(dlock.ConstantBackoff(0)), dlock.WithObserver(obs)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key: %v, want ErrNotAcquired", err)
	}
	if max := int(d/time.Millisecond) + 1; attempts > max {
		t.Errorf("%d attempts in %v with ConstantBackoff(0), want at most %d (1ms apart)", attempts, d, max)
	}
}
