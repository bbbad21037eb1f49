package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
)

// TestListensOnlyWhileWaiting: a Locker keeps its listening session while it has
// waiters and for a while after (the linger, 100ms here), then closes it —
// PostgreSQL signals every listening session of the database on each NOTIFY, and
// each spends a transaction on it, so a session kept for good taxes every release
// in the database. A later waiter listens again and its turn's notification still
// wakes it: with a TTL of a minute nothing else would within the test's bound.
// Shown failing (the session stays) with the linger at an hour.
func TestListensOnlyWhileWaiting(t *testing.T) {
	defer pglock.SetListenLinger(100 * time.Millisecond)()
	h := newTableHarness(t, true)
	holder, waiter := h.NewLocker(t), h.NewLocker(t)
	k := "listen-linger"
	for round := range 2 {
		ls, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			lw, err := waiter.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
			if err == nil {
				err = lw.Release(context.Background())
			}
			got <- err
		}()
		awaitListeners(t, h.admin, 1)
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("round %d: the waiter: %v", round, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the waiter was not woken by the release within 10s", round)
		}
		awaitListeners(t, h.admin, 0)
	}
}

// awaitListeners waits until n sessions of the admin pool's database listen (their
// last statement a LISTEN), failing t after 10s.
func awaitListeners(t *testing.T, admin *pgxpool.Pool, n int) {
	t.Helper()
	var got int
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := admin.QueryRow(ctxFor(t, 10*time.Second),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'").Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions listen after 10s, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}
