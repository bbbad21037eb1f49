package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/locktest"
)

// TestWriterPlaceEnds: the read-write lock's waiting writer keeps new readers out
// only while it waits. A writer whose wait is cancelled gives its place up at once
// (a reader is granted right after), and a place whose writer stopped asking (a
// crashed process: here a place written into the store) keeps readers out until it
// expires, no longer: a blocked reader gets in then, without a release to wake it.
func TestWriterPlaceEnds(t *testing.T) {
	addr := sharedRedis(t).Addr()
	admin := client(t, addr)
	ctx := ctxFor(t, 30*time.Second)
	newRW := func(k string) *dlock.RWMutex { return rwMutex(t, addr, k) }
	place := func(k string) string {
		t.Helper()
		v, err := admin.Get(ctx, redislock.WriterWaitKey(k)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return v
	}

	t.Run("cancelled", func(t *testing.T) {
		k := uniqueKey("rw-writer-cancelled")
		r1, w, r2 := newRW(k), newRW(k), newRW(k)
		held, err := r1.TryAcquireShared(ctx, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := w.Acquire(wctx)
			done <- err
		}()
		for place(k) == "" {
			select {
			case err := <-done:
				t.Fatalf("the writer ended before it waited: %v", err)
			case <-time.After(time.Millisecond):
			}
		}
		if ls, err := r2.TryAcquireShared(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if ls != nil {
				_ = ls.Release(ctx)
			}
			t.Fatalf("a reader while a writer waits: %v, want ErrNotAcquired", err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled writer: %v, want context.Canceled", err)
		}
		if p := place(k); p != "" {
			t.Fatalf("the cancelled writer's place is still in the store")
		}
		ls, err := r2.TryAcquireShared(ctx)
		if err != nil {
			t.Fatalf("a reader after the writer left: %v", err)
		}
		_ = ls.Release(ctx)
	})

	t.Run("crashed", func(t *testing.T) {
		k := uniqueKey("rw-writer-crashed")
		const life = 300 * time.Millisecond
		start := time.Now() // before the place is written: it expires no earlier than life after this
		if err := admin.Set(ctx, redislock.WriterWaitKey(k), "gone-writer", life).Err(); err != nil {
			t.Fatal(err)
		}
		r := newRW(k)
		if ls, err := r.TryAcquireShared(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if ls != nil {
				_ = ls.Release(ctx)
			}
			t.Fatalf("a reader while a writer's place lives: %v, want ErrNotAcquired", err)
		}
		ls, err := r.AcquireShared(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatalf("a reader waiting out a crashed writer's place: %v", err)
		}
		defer ls.Release(ctx)
		if waited := time.Since(start); waited < life-10*time.Millisecond {
			t.Fatalf("the reader got in %v after the place was written, before it expired (%v)", waited, life)
		}
	})
}

// TestRWWaitLongerThanTTL: a read-write lock's waiter may wait longer than its own
// TTL (locktest.RWWaitLongerThanTTL).
func TestRWWaitLongerThanTTL(t *testing.T) {
	addr := sharedRedis(t).Addr()
	locktest.RWWaitLongerThanTTL(t, func(t *testing.T, k string) *dlock.RWMutex { return rwMutex(t, addr, k) })
}

// rwMutex returns a read-write lock on k of a new client of addr, closed when t ends.
func rwMutex(t testing.TB, addr, k string) *dlock.RWMutex {
	t.Helper()
	l := redislock.New(client(t, addr))
	t.Cleanup(func() { _ = l.Close() })
	m, err := dlock.NewRWMutex(l, k)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
