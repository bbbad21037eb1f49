package bsmpeer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestExclusionWithRedislock: a lock taken by the bsm/redislock library and one taken
// by dlock's redislock.New on the same key name exclude each other, and a stale dlock
// lease cannot free bsm's lock (the owner value is checked). Plain SET NX PX is
// checked by backends/redislock's TestPeerExclusion.
func TestExclusionWithRedislock(t *testing.T) {
	addr := servertest.Redis(t).Addr()
	raw := redis.NewClient(&redis.Options{Addr: addr})
	defer raw.Close()
	l := redislock.New(raw)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := func(what string) string { return fmt.Sprintf("%s/%s/%d", t.Name(), what, time.Now().UnixNano()) }

	t.Run("bsm holds", func(t *testing.T) {
		k := key("bsm")
		peer, err := bsm.Obtain(ctx, raw, k, 30*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a key bsm/redislock holds: want ErrNotAcquired, got %v", err)
		}
		if err := peer.Release(ctx); err != nil {
			t.Fatalf("bsm Release: %v", err)
		}
		ls, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire after bsm's release: %v", err)
		}
		_ = ls.Release(ctx)
	})
	t.Run("dlock holds", func(t *testing.T) {
		k := key("dlock")
		ls, err := l.TryAcquire(ctx, k, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bsm.Obtain(ctx, raw, k, 30*time.Second, nil); !errors.Is(err, bsm.ErrNotObtained) {
			t.Fatalf("bsm Obtain on a key dlock holds: want ErrNotObtained, got %v", err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		peer, err := bsm.Obtain(ctx, raw, k, 30*time.Second, nil)
		if err != nil {
			t.Fatalf("bsm Obtain after dlock's release: %v", err)
		}
		if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("second Release: want ErrNotHeld, got %v", err)
		}
		if ttl, err := peer.TTL(ctx); err != nil || ttl <= 0 {
			t.Fatalf("bsm's lock after a stale dlock Release: ttl %v, %v", ttl, err)
		}
		_ = peer.Release(ctx)
	})
}

// TestObserverSeesPeerLeases: a peer's leases run under dlock's lease core, so a
// Locker opened by a peer+ URL reports its acquire, renewals and end to an Observer
// (dlockprom's, or any) like a backend's, under the peer's name.
func TestObserverSeesPeerLeases(t *testing.T) {
	var mu sync.Mutex
	var seen []dlock.EventKind
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Backend != "bsm/redislock" {
			t.Errorf("event of backend %q, want bsm/redislock", e.Backend)
		}
		mu.Lock()
		seen = append(seen, e.Kind)
		mu.Unlock()
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := dlock.Instrument(servertest.Open(t, "peer+bsm://"+servertest.Redis(t).Addr()), obs)
	ls, err := l.Acquire(ctx, t.Name(), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []dlock.EventKind{dlock.EventAcquire, dlock.EventRenew, dlock.EventEnd}; !slices.Equal(seen, want) {
		t.Fatalf("events %v, want %v", seen, want)
	}
}
