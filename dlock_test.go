package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b", "🔒", "a\x00b", strings.Repeat("k", 255)} {
		if err := dlock.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("k", 256), "\xff", strings.Repeat("é", 128)} {
		err := dlock.ValidateKey(k)
		if !errors.Is(err, dlock.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
	if err := dlock.ValidateKey(strings.Repeat("k", 300)); !strings.Contains(err.Error(), "300 bytes") {
		t.Errorf("error does not say what is wrong: %v", err)
	}
}

func TestRetryStrategies(t *testing.T) {
	lin := dlock.ConstantBackoff(7 * time.Millisecond)
	for a := 1; a < 5; a++ {
		if d := lin.Backoff(a); d != 7*time.Millisecond {
			t.Errorf("linear attempt %d: %v", a, d)
		}
	}
	exp := dlock.ExponentialBackoff(time.Millisecond, 64*time.Millisecond)
	for a := 1; a < 100; a++ {
		ceil := min(time.Millisecond<<min(a-1, 20), 64*time.Millisecond)
		for range 50 {
			if d := exp.Backoff(a); d <= 0 || d > ceil {
				t.Fatalf("exponential attempt %d: %v outside (0, %v]", a, d, ceil)
			}
		}
	}
	// Jitter: many draws are not all equal.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[exp.Backoff(10)] = true
	}
	if len(seen) < 10 {
		t.Errorf("exponential backoff has no jitter: %d distinct values in 50 draws", len(seen))
	}
	lim := dlock.LimitRetry(lin, 3)
	for a := 1; a <= 3; a++ {
		if lim.Backoff(a) < 0 {
			t.Errorf("limit 3 stopped at retry %d", a)
		}
	}
	if lim.Backoff(4) >= 0 {
		t.Error("limit 3 did not stop at retry 4")
	}
}

func TestAcquireGivesUpWhenRetriesRunOut(t *testing.T) {
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	ctx := context.Background()
	held, err := l.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	var attempts int
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventAcquire {
			attempts = e.Attempts
		}
	})
	_, err = l.Acquire(ctx, "k", dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(time.Millisecond), 2)), dlock.WithObserver(obs))
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("want ErrNotAcquired, got %v", err)
	}
	// One attempt, one after subscribing to wake-ups, then 2 retries.
	if attempts != 4 {
		t.Errorf("attempts = %d, want 4", attempts)
	}
}

func TestWaiterWokenByRelease(t *testing.T) {
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	ctx := context.Background()
	held, err := l.TryAcquire(ctx, "k", dlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	waiting := make(chan struct{})
	var once sync.Once
	// The strategy is asked for a delay just before the waiter blocks (after it has
	// subscribed and looked again). An hour: only a wake-up ends this wait in time.
	hour := dlock.RetryFunc(func(int) time.Duration {
		once.Do(func() { close(waiting) })
		return time.Hour
	})
	go func() {
		ls, err := l.Acquire(ctx, "k", dlock.WithRetry(hour))
		if err == nil {
			err = ls.Release(ctx)
		}
		got <- err
	}()
	<-waiting
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}

func TestObserverEvents(t *testing.T) {
	var mu sync.Mutex
	var events []dlock.Event
	obs := dlock.ObserverFunc(func(e dlock.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
	l := dlock.Instrument(memlock.New(memlock.WithStore(memlock.NewStore())), obs)
	defer l.Close()
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "k", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	kinds := []dlock.EventKind{}
	for _, e := range events {
		kinds = append(kinds, e.Kind)
		if e.Key != "k" || e.Backend != "mem" {
			t.Errorf("event %+v: wrong key or backend", e)
		}
	}
	want := []dlock.EventKind{dlock.EventAcquire, dlock.EventRenew, dlock.EventEnd}
	if len(kinds) != len(want) || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	if !errors.Is(events[2].Err, dlock.ErrReleased) {
		t.Errorf("end event reason %v, want ErrReleased", events[2].Err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	l, err := dlock.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for url, want := range map[string]string{
		"nosuch://x":    `unknown scheme "nosuch"`,
		"no-scheme":     "has no scheme",
		"mem://?ttl=1s": `unknown query parameter "ttl"`,
		"mem://host":    "takes no host",
		"%zz://":        "invalid url",
	} {
		_, err := dlock.Open(ctx, url)
		if !errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL saying %q", url, err, want)
		}
	}
	if s := dlock.Schemes(); !slices.Contains(s, "mem") || !slices.IsSorted(s) {
		t.Errorf("Schemes() = %v", s)
	}
}

func TestTTLShorterThanDrift(t *testing.T) {
	// A TTL within the drift allowance would leave no validity at all.
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	_, err := l.TryAcquire(context.Background(), "k", dlock.WithTTL(time.Millisecond))
	if !errors.Is(err, dlock.ErrInvalidTTL) || !strings.Contains(err.Error(), "drift") {
		t.Fatalf("ttl shorter than the drift: want ErrInvalidTTL naming the drift, got %v", err)
	}
}
