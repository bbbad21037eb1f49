package redislock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
)

// hammer runs a client per entry of sets that takes its set (AcquireAll, or
// Acquire for one key) over and over, holds it 2ms and releases it, until the
// returned stop is called; it returns once each has been granted once.
func hammer(t *testing.T, addr string, sets [][]string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	started := make(chan struct{}, len(sets))
	errs := make(chan error, len(sets))
	for _, set := range sets {
		l := redislock.New(client(t, addr))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer l.Close()
			for first := true; ctx.Err() == nil; first = false {
				var ls dlock.Lease
				var err error
				if len(set) == 1 {
					ls, err = l.Acquire(ctx, set[0], dlock.WithTTL(10*time.Second))
				} else {
					ls, err = dlock.AcquireAll(ctx, l, set, dlock.WithTTL(10*time.Second))
				}
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if first {
					started <- struct{}{}
				}
				time.Sleep(2 * time.Millisecond) // the work done under the lock
				if err := ls.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	stop = func() {
		cancel()
		wg.Wait()
		select {
		case err := <-errs:
			t.Errorf("a hammering client: %v", err)
		default:
		}
	}
	for range sets {
		select {
		case <-started:
		case err := <-errs:
			stop()
			t.Fatalf("a hammering client: %v", err)
		}
	}
	return stop
}

// fences returns the fencing counters of keys: how many times each was granted.
func fences(t *testing.T, c *redis.Client, keys []string) []uint64 {
	t.Helper()
	out := make([]uint64, len(keys))
	for i, k := range keys {
		n, err := c.Get(ctxFor(t, 10*time.Second), redisops.FenceKey(k)).Uint64()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		out[i] = n
	}
	return out
}

// A set of keys is not passed over for ever by clients that keep taking its keys,
// one by one or in other sets: the waiting set is in the queue of each of its keys
// at once, and once it has waited the barging window the others queue behind it
// there. Four clients take keys a and b (or sets that overlap {a, b} in one key)
// over and over and hold them 2ms; a set {a, b} waits. It is granted once those
// in the queues before it have been, a few grants of each key; the bound below
// leaves room for a slow machine (a grant takes at least the 2ms hold, so a slow
// machine passes the set fewer times, not more). Waiting in one key's queue at a
// time, the set gets that key, finds the other held and gives the first back:
// it is granted only when both happen to be free at once, after hundreds of grants
// of its keys to the others, or never.
func TestSetWaiterIsNotPassedOver(t *testing.T) {
	addr := sharedRedis(t).Addr()
	admin := client(t, addr)
	w := redislock.New(client(t, addr))
	defer w.Close()
	for _, tc := range []struct {
		name   string
		others func(a, b, c string) [][]string
	}{
		{"keys", func(a, b, _ string) [][]string { return [][]string{{a}, {a}, {b}, {b}} }},
		{"sets", func(a, b, c string) [][]string { return [][]string{{a, c}, {a}, {b, c}, {b}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for trial := range 3 {
				a, b, c := uniqueKey("set/a"), uniqueKey("set/b"), uniqueKey("set/c")
				set := []string{a, b}
				stop := hammer(t, addr, tc.others(a, b, c))
				before := fences(t, admin, set)
				ls, err := dlock.AcquireAll(ctxFor(t, 20*time.Second), w, set, dlock.WithTTL(10*time.Second))
				stop()
				if err != nil {
					t.Fatalf("trial %d: the set: %v", trial, err)
				}
				passed := 0
				sl := ls.(*dlock.SetLease)
				for i, k := range set {
					passed += int(sl.TokenOf(k) - before[i] - 1)
				}
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Fatal(err)
				}
				t.Logf("trial %d: the set %s was passed over %d times", trial, strings.Join(set, ","), passed)
				if passed > 50 {
					t.Errorf("trial %d: the set was passed over %d times by clients taking its keys, want at most 50", trial, passed)
				}
			}
		})
	}
}
