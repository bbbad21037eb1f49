package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/internal/herdtest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestReleaseWakesOne: a release wakes the first waiter of the key's queue alone, in
// both modes. 100 waiters, each a Locker with a pool of its own, queue behind a
// holder; each releases as soon as it is granted and asks again, three times. The
// statements the waiters send per hand-off (counted as writes on their connections:
// one per statement) stay a handful — the release, the woken waiter's claim and
// leave, its next Acquire's try, joining the queue and first claim — where a
// release that woke every waiter would cost a statement per waiter. Shown failing
// (87 per hand-off) with the release notifying the key's listeners instead of
// the first waiter.
func TestReleaseWakesOne(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin); err != nil {
		t.Fatal(err)
	}
	for _, fifo := range []bool{false, true} {
		name := "default"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			const n, rounds = 100, 3
			k := "herd-" + name
			var writes atomic.Int64
			newLocker := func() dlock.Locker {
				cfg, err := pgxpool.ParseConfig(p.URL(db))
				if err != nil {
					t.Fatal(err)
				}
				l := pglock.New(countingPool(t, cfg, &writes), pglock.WithFIFO(fifo))
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			holder := newLocker()
			lh, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ls := make([]dlock.Locker, n)
			for i := range ls {
				ls[i] = newLocker()
			}
			done := herdtest.Churn(ls, rounds, func(l dlock.Locker) (dlock.Lease, error) {
				return l.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
			})
			awaitQueued(t, admin, k, n, 30*time.Second)
			before := writes.Load()
			if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			const bound = 12
			each := float64(writes.Load()-before) / (n * rounds)
			t.Logf("%d statements for %d hand-offs (%.1f each; bound %d)", writes.Load()-before, n*rounds, each, bound)
			if each > bound {
				t.Errorf("%.1f statements per hand-off with %d waiters, want at most %d: a release wakes more than the first waiter", each, n, bound)
			}
		})
	}
}

// TestBargingIsBounded: in the default mode a caller may take a free lock ahead of
// a waiter that queued less than the barging window ago, and not ahead of one that
// has waited longer — neither by TryAcquire nor by an Acquire that queues behind
// it. The waiter ahead is a row of the queue table written by hand (a waiter that
// never claims and is never woken), its since set far in the future (young for
// good), then far in the past. Shown failing with the default mode's take-over
// unconditioned (the holder takes the lock back past the old waiter), with it
// refusing every live waiter as the fair mode does (no barging past the young one),
// and with the claim unconditioned (the queued Acquire passes the old waiter).
func TestBargingIsBounded(t *testing.T) {
	h := newTableHarness(t, false)
	a, b := h.NewLocker(t), h.NewLocker(t)
	release(t, tryAcquire(t, b, "barging-warm-up")) // b's first lock looks for the pooler and the queue
	k := "barging"
	ls := tryAcquire(t, a, k, dlock.WithTTL(time.Minute))
	exec := func(q string) {
		t.Helper()
		if _, err := h.admin.Exec(ctxFor(t, 10*time.Second), q, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	q := pglock.QueueTable(pglock.DefaultTable)
	exec(`INSERT INTO ` + q + ` (lock_key, waiter, deadline, since)
VALUES ($1, gen_random_uuid(), statement_timestamp() + interval '1 minute', statement_timestamp() + interval '1 hour')`)
	release(t, ls)
	ls = tryAcquire(t, a, k, dlock.WithTTL(time.Minute)) // past a waiter inside the window

	// b queues behind the young waiter; the release wakes that waiter (which never
	// claims), and b's claim at the renewal of its place (every 100ms) passes it.
	got := make(chan error, 1)
	acquireB := func(within time.Duration) {
		go func() {
			lb, err := b.Acquire(ctxFor(t, within), k, dlock.WithTTL(300*time.Millisecond))
			if err == nil {
				err = lb.Release(context.Background())
			}
			got <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); queued(t, h.admin, k) < 2; {
			select {
			case err := <-got:
				t.Fatalf("b's Acquire ended (%v) before it was seen queued behind the waiter", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("b not queued behind the waiter after 10s")
			}
			time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
		}
	}
	acquireB(10 * time.Second)
	release(t, ls)
	if err := <-got; err != nil {
		t.Fatalf("Acquire queued behind a waiter inside the window: %v", err)
	}

	exec(`UPDATE ` + q + ` SET since = statement_timestamp() - interval '1 second' WHERE lock_key = $1`)
	if ls, err := a.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			release(t, ls)
		}
		t.Fatalf("TryAcquire past a waiter that waited longer than the window: %v, want ErrNotAcquired", err)
	}
	// Queued (seen in the table), b claims at once and at each renewal of its
	// place: none of its claims may pass the old waiter.
	acquireB(time.Second)
	if err := <-got; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire queued behind a waiter that waited longer than the window: %v, want the deadline", err)
	}
	exec(`DELETE FROM ` + q + ` WHERE lock_key = $1`) // the waiter leaves
	release(t, tryAcquire(t, b, k))
}

// TestDefaultModeWithoutQueuePrivileges: a lock user granted only what older docs
// said the default mode needs (the lock table) keeps the default mode as it was —
// no queue — instead of failing on the queue table: a release wakes its waiter at
// once (TTL a minute). Shown failing (permission denied for the queue table) with
// the Locker looking only for the since column.
func TestDefaultModeWithoutQueuePrivileges(t *testing.T) {
	h := newTableHarness(t, false)
	role := fmt.Sprintf("lockonly%d", time.Now().UnixNano())
	for _, q := range []string{"CREATE ROLE " + role + " LOGIN", "GRANT SELECT, INSERT, UPDATE ON " + pglock.DefaultTable + " TO " + role} {
		if _, err := h.admin.Exec(ctxFor(t, 10*time.Second), q); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(h.admin.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	pl := pool(t, u.String())
	holder, waiter := pglock.New(pl), pglock.New(pl)
	t.Cleanup(func() {
		_ = holder.Close()
		_ = waiter.Close()
		pl.Close()
		_, _ = h.admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = h.admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	handOff(t, h, holder, waiter, "lock-table-only", 0)
}

// TestDefaultModeWithoutSince: a database whose queue table lacks the since column
// (made by a Migrate of before the default mode queued), or has no queue table at
// all, keeps the default mode as it was — every waiter listens for the key's
// releases — and a release still wakes a waiter at once (its TTL is a minute: only
// the notification wakes it within the test's bound); a later Migrate adds the
// column, and a Locker made after it queues its waiters. Shown failing with the old
// default mode's wait not listening.
func TestDefaultModeWithoutSince(t *testing.T) {
	for _, drop := range []string{"ALTER TABLE %s DROP COLUMN since", "DROP TABLE %s"} {
		h := newTableHarness(t, false)
		q := pglock.QueueTable(pglock.DefaultTable)
		if _, err := h.admin.Exec(ctxFor(t, 10*time.Second), fmt.Sprintf(drop, q)); err != nil {
			t.Fatal(err)
		}
		k := "old-default"
		holder, waiter := pglock.New(h.admin), pglock.New(h.admin)
		defer holder.Close()
		defer waiter.Close()
		handOff(t, h, holder, waiter, k, 0)
		_ = holder.Close() // and its listening session, which handOff counts
		_ = waiter.Close()
		if err := pglock.Migrate(ctxFor(t, 30*time.Second), h.admin); err != nil {
			t.Fatal(err)
		}
		holder2, waiter2 := pglock.New(h.admin), pglock.New(h.admin)
		defer holder2.Close()
		defer waiter2.Close()
		handOff(t, h, holder2, waiter2, k, 1)
	}
}
