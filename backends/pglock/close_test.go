package pglock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/internal/closetest"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestCloseWaitsForWaiters: a waiter whose Locker closes leaves the queue (the lease
// table's queue table in either mode, a pg_advisory_lock waiting on the server)
// before the client closes, and a grant that lands during Close is released
// (closetest).
func TestCloseWaitsForWaiters(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin, pglock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	urlAt := func(scheme, q string) func(addr string) string {
		return func(addr string) string { return lockURL(scheme, addr, db, q) }
	}
	t.Run("default", func(t *testing.T) {
		closetest.Run(t, closetest.Target{Addr: p.Addr(), URL: urlAt(pglock.Scheme, ""),
			Waiting: func(t testing.TB, key string) int { return queued(t, admin, key) }})
	})
	t.Run("fifo", func(t *testing.T) {
		closetest.Run(t, closetest.Target{Addr: p.Addr(), URL: urlAt(pglock.Scheme, "fifo=true"),
			Waiting: func(t testing.TB, key string) int { return queued(t, admin, key) }})
	})
	t.Run("advisory", func(t *testing.T) {
		closetest.Run(t, closetest.Target{Addr: p.Addr(), URL: urlAt(pglock.AdvisoryScheme, ""),
			Waiting: func(t testing.TB, key string) int { return advisoryWaiters(t, admin, key) }})
	})
}

// TestMixedModesExclude: clients of the fair mode and of the default mode on one key
// exclude each other (both take the same lease row; the fair mode adds its queue):
// goroutines of each kind take the lock in turn, and none ever finds another inside.
func TestMixedModesExclude(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), pool(t, p.URL(db)), pglock.WithFIFO(true)); err != nil {
		t.Fatal(err)
	}
	plain, fair := pglock.New(pool(t, p.URL(db))), pglock.New(pool(t, p.URL(db)), pglock.WithFIFO(true))
	defer plain.Close()
	defer fair.Close()
	locktest.MutuallyExclusive(t, fmt.Sprintf("mixed/%d", time.Now().UnixNano()), plain, fair)
}
