package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
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
	newRW := func(k string) *dlock.RWMutex {
		t.Helper()
		l := redislock.New(client(t, addr))
		t.Cleanup(func() { _ = l.Close() })
		m, err := dlock.NewRWMutex(l, k)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
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
// TTL (behind a writer, or a writer behind readers): its lease's TTL starts with the
// request that granted it, not with the wait, so the grant is good.
func TestRWWaitLongerThanTTL(t *testing.T) {
	addr := sharedRedis(t).Addr()
	ctx := ctxFor(t, 30*time.Second)
	for _, c := range []struct {
		name        string
		holdShared  bool
		waitsShared bool
	}{{"reader behind a writer", false, true}, {"writer behind a reader", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			k := uniqueKey("rw-long-wait")
			open := func() *dlock.RWMutex {
				l := redislock.New(client(t, addr))
				t.Cleanup(func() { _ = l.Close() })
				m, err := dlock.NewRWMutex(l, k)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			holder, waiter := open(), open()
			take := func(m *dlock.RWMutex, shared bool, opts ...dlock.Option) (dlock.Lease, error) {
				if shared {
					return m.AcquireShared(ctx, opts...)
				}
				return m.Acquire(ctx, opts...)
			}
			held, err := take(holder, c.holdShared, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const ttl = 200 * time.Millisecond
			got := make(chan error, 1)
			go func() {
				ls, err := take(waiter, c.waitsShared, dlock.WithTTL(ttl))
				if err == nil {
					err = ls.Release(ctx)
				}
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("the waiter returned while the key was held: %v", err)
			case <-time.After(3 * ttl): // the wait must outlast the waiter's TTL
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("a waiter granted after waiting longer than its TTL: %v", err)
			}
		})
	}
}
