package mysqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/internal/locktest"
)

// places counts the live writers' places of k in the holders table.
func places(t testing.TB, admin *sql.DB, k string) int {
	t.Helper()
	var n int
	err := admin.QueryRowContext(ctxFor(t, 10*time.Second), "SELECT COUNT(*) FROM "+mysqllock.HoldersTable(mysqllock.DefaultTable)+
		" WHERE lock_key = ? AND kind = 'wwait' AND expires_at > UTC_TIMESTAMP(6)", k).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rwOn returns the read-write lock k on a new client of h, closed when t ends.
func rwOn(t *testing.T, h *tableHarness, k string) *dlock.RWMutex {
	t.Helper()
	l := h.NewLocker(t)
	t.Cleanup(func() { _ = l.Close() })
	m, err := dlock.NewRWMutex(l, k)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWriterPlaceEnds: a waiting writer's place keeps new readers out while it
// waits (and Describe shows it as a waiter), and ends with its wait — at once when the wait is cancelled, at the place's
// expiry when the writer crashed (a place written by hand that nobody renews).
func TestWriterPlaceEnds(t *testing.T) {
	h := newTableHarness(t, false)
	ctx := ctxFor(t, 30*time.Second)
	newRW := func(k string) *dlock.RWMutex { return rwOn(t, h, k) }

	inspector := h.NewLocker(t)
	t.Cleanup(func() { _ = inspector.Close() })

	t.Run("cancelled", func(t *testing.T) {
		k := "rw-writer-cancelled"
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
		for places(t, h.admin, k) == 0 {
			select {
			case err := <-done:
				t.Fatalf("the writer ended before it waited: %v", err)
			case <-time.After(time.Millisecond): // polling the table: there is no signal for it
			}
		}
		if ls, err := r2.TryAcquireShared(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			if ls != nil {
				_ = ls.Release(ctx)
			}
			t.Fatalf("a reader while a writer waits: %v, want ErrNotAcquired", err)
		}
		states, err := dlock.Describe(ctx, inspector, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(states) != 1 || len(states[0].Holders) != 1 || !states[0].Holders[0].Shared || len(states[0].Waiters) != 1 {
			t.Fatalf("Describe while a writer waits behind a reader: %+v, want one shared holder and one waiter", states)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled writer: %v, want context.Canceled", err)
		}
		if n := places(t, h.admin, k); n != 0 {
			t.Fatalf("the cancelled writer's place is still in the table")
		}
		ls, err := r2.TryAcquireShared(ctx)
		if err != nil {
			t.Fatalf("a reader after the writer left: %v", err)
		}
		_ = ls.Release(ctx)
	})

	t.Run("crashed", func(t *testing.T) {
		k := "rw-writer-crashed"
		const life = 300 * time.Millisecond
		r := newRW(k) // the first lock call creates the table's statements
		if ls, err := r.TryAcquireShared(ctx); err != nil {
			t.Fatal(err)
		} else {
			_ = ls.Release(ctx)
		}
		start := time.Now() // before the place is written: it expires no earlier than life after this
		if _, err := h.admin.ExecContext(ctx, "INSERT INTO "+mysqllock.HoldersTable(mysqllock.DefaultTable)+
			" (lock_key, owner, kind, lim, token, expires_at) VALUES (?, ?, 'wwait', 0, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
			k, "gone-writer-0123", life.Microseconds()); err != nil {
			t.Fatal(err)
		}
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
	h := newTableHarness(t, false)
	locktest.RWWaitLongerThanTTL(t, func(t *testing.T, k string) *dlock.RWMutex { return rwOn(t, h, k) })
}
