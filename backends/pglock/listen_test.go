package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
)

// TestListensOnlyWhileWaiting: a Locker's session listens while the Locker has
// waiters and leaves the channel (UNLISTEN) as soon as it has none, though it
// keeps the connection (for the linger, an hour here) — PostgreSQL signals every
// listening session of the database on each NOTIFY, and each spends a transaction
// on it, so a session that kept listening would tax every release in the
// database. A later waiter listens again on the same connection and its turn's
// notification still wakes it: with a TTL of a minute nothing else would within
// the test's bound. Shown failing (the session stays listening) with the hub
// leaving the channel only when it closes the connection.
func TestListensOnlyWhileWaiting(t *testing.T) {
	defer pglock.SetListenLinger(time.Hour)()
	h := newTableHarness(t, true)
	holder, waiter := h.NewLocker(t), h.NewLocker(t)
	k := "listen-linger"
	for range 2 {
		handOff(t, h, holder, waiter, k, 0)
		awaitListeners(t, h.admin, 0)
	}
}

// handOff: holder takes k, waiter waits for it (listening, and with queue > 0 until
// k's queue has that many rows), holder releases, and the waiter must be granted
// within 10s.
func handOff(t *testing.T, h *tableHarness, holder, waiter dlock.Locker, k string, queue int) {
	t.Helper()
	ls := tryAcquire(t, holder, k, dlock.WithTTL(time.Minute))
	got := make(chan error, 1)
	go func() {
		lw, err := waiter.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
		if err == nil {
			err = lw.Release(context.Background())
		}
		got <- err
	}()
	awaitListeners(t, h.admin, 1)
	if queue > 0 {
		awaitQueued(t, h.admin, k, queue, 10*time.Second)
	}
	release(t, ls)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release within 10s")
	}
}

// awaitQueued waits until key's queue has n live rows, failing t after within.
func awaitQueued(t *testing.T, admin *pgxpool.Pool, key string, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); queued(t, admin, key) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued after %v, want %d", queued(t, admin, key), within, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
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
