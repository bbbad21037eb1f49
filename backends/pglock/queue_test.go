package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/internal/herdtest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestReleaseWakesOne: a hand-off costs the database the same few transactions
// however many wait, in both modes. 100 waiters, each a Locker with a pool of its
// own, queue behind a holder; each releases as soon as it is granted and asks
// again, three times. Every transaction the database ran meanwhile is counted
// (handOffCost): the release, the woken waiter's claim and leave, its next
// Acquire's try, joining the queue, the looks of the waiters far back, and each
// listening session's reading of every notification — PostgreSQL signals every
// listening session of the database at each NOTIFY, so waiters that all listened
// would cost a transaction each per hand-off. Shown failing with every waiter
// listening, as before waiters far back paced their looks (110 per hand-off), and
// with far waiters that, listening once the queue stood still (before the
// release), never go back to pacing (57 and 63).
func TestReleaseWakesOne(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(modeName(fifo), func(t *testing.T) {
			const n, bound = 100, 50
			each := handOffCost(t, fifo, n, 3, 0)
			if each > bound {
				t.Errorf("%.1f transactions per hand-off with %d waiters, want at most %d: a release costs a transaction per waiter", each, n, bound)
			}
		})
	}
}

// TestSlowHandOffsCostNoMore: with holds of 60ms, which the waiters far back see
// as a queue that stands still between moves, a hand-off costs the database about
// what it did when every waiter listened: a transaction per waiter (its listening
// session's reading of the release), plus the few of the hand-off itself (44 per
// hand-off before waiters far back paced their looks). 30 waiters, each holding
// the lock 60ms, twice. Shown failing (58 per hand-off) with far waiters that look
// at every move they hear while they listen.
func TestSlowHandOffsCostNoMore(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(modeName(fifo), func(t *testing.T) {
			const n = 30
			each := handOffCost(t, fifo, n, 2, 60*time.Millisecond)
			if bound := float64(n + 20); each > bound {
				t.Errorf("%.1f transactions per hand-off with %d waiters holding 60ms, want at most %.0f", each, n, bound)
			}
		})
	}
}

func modeName(fifo bool) string {
	if fifo {
		return "fifo"
	}
	return "default"
}

// handOffCost queues n waiters, each a Locker with a pool of its own, behind a
// holder on one key of a fresh database; once all are queued the holder releases,
// and each waiter holds the lock for hold when granted, releases, and asks again,
// rounds times. It returns the transactions the database ran per hand-off, every
// one counted (setting up included) once every session has closed and reported
// (transactions).
func handOffCost(t *testing.T, fifo bool, n, rounds int, hold time.Duration) float64 {
	t.Helper()
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	if err := pglock.Migrate(ctxFor(t, 30*time.Second), admin); err != nil {
		t.Fatal(err)
	}
	k := "herd"
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
		closers = nil
	}
	defer closeAll()
	newLocker := func() dlock.Locker {
		pl := pool(t, p.URL(db))
		l := pglock.New(pl, pglock.WithFIFO(fifo))
		closers = append(closers, func() { _ = l.Close(); pl.Close() })
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
		ls, err := l.Acquire(ctxFor(t, 2*time.Minute), k, dlock.WithTTL(time.Minute))
		if err == nil && hold > 0 {
			time.Sleep(hold) // the holder's work
		}
		return ls, err
	})
	awaitQueued(t, admin, k, n, 30*time.Second)
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	closeAll()
	admin.Close()
	xacts := transactions(t, p, db)
	each := float64(xacts) / float64(n*rounds)
	t.Logf("%d transactions for %d hand-offs (%.1f each, setting up included)", xacts, n*rounds, each)
	return each
}

// transactions returns how many transactions database db of p has run, once no
// session of it is left (a session adds its count to the database's when it
// exits, and only now and then before); read from the "postgres" database, so
// the reading is not counted.
func transactions(t *testing.T, p *servers.Postgres, db string) int64 {
	t.Helper()
	c, err := pgx.Connect(ctxFor(t, 10*time.Second), p.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for deadline := time.Now().Add(30 * time.Second); ; {
		var open int
		err := c.QueryRow(ctxFor(t, 10*time.Second),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", db).Scan(&open)
		if err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions of database %s still open after 30s", open, db)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
	var xacts int64
	err = c.QueryRow(ctxFor(t, 10*time.Second),
		"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", db).Scan(&xacts)
	if err != nil {
		t.Fatal(err)
	}
	return xacts
}

// TestFarWaiterHearsItsTurn: a waiter far back stops looking once the queue has
// stood still and listens, for its own turn too. The waiters ahead of it are rows
// of the queue table written by hand (waiters that never claim), so the queue
// stands; they are deleted and the waiter's turn is announced by hand, as a
// waiter ahead that leaves announces the next one's: the waiter takes the free
// lock at once, not at its next renewal (a third of its TTL of a minute). Shown
// failing (20s later) with a far waiter that listens for the queue's moves alone.
func TestFarWaiterHearsItsTurn(t *testing.T) {
	for _, fifo := range []bool{false, true} {
		t.Run(modeName(fifo), func(t *testing.T) {
			h := newTableHarness(t, fifo)
			var writes atomic.Int64
			far := pglock.New(countingPool(t, h.admin.Config(), &writes), pglock.WithFIFO(fifo))
			t.Cleanup(func() { _ = far.Close() })
			k := "far-turn"
			exec := func(q string, args ...any) {
				t.Helper()
				if _, err := h.admin.Exec(ctxFor(t, 10*time.Second), q, args...); err != nil {
					t.Fatal(err)
				}
			}
			release(t, tryAcquire(t, h.NewLocker(t), k)) // the key's row: a free lock, not a new key
			q := pglock.QueueTable(pglock.DefaultTable)
			exec(`INSERT INTO `+q+` (lock_key, waiter, deadline, since)
SELECT $1, gen_random_uuid(), statement_timestamp() + interval '1 minute', statement_timestamp() - interval '1 hour'
FROM generate_series(1, 12)`, []byte(k))
			got := acquireAsync(t, far, k)
			awaitQueued(t, h.admin, k, 13, 10*time.Second)
			awaitQuiet(t, &writes)
			exec(`WITH w AS (SELECT waiter FROM `+q+` WHERE lock_key = $1 ORDER BY seq DESC LIMIT 1),
  d AS (DELETE FROM `+q+` WHERE lock_key = $1 AND waiter <> (SELECT waiter FROM w))
SELECT pg_notify($2, 'w' || waiter::text) FROM w`, []byte(k), pglock.DefaultTable)
			awaitGranted(t, got, "of its turn's announcement")
		})
	}
}

// acquireAsync acquires k on l in the background (for a minute at most), releases
// what it got, and reports on the returned channel.
func acquireAsync(t *testing.T, l dlock.Locker, k string) <-chan error {
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
		if err == nil {
			err = ls.Release(context.Background())
		}
		got <- err
	}()
	return got
}

// awaitGranted waits for got's report, failing t unless it is a grant within 10s.
func awaitGranted(t *testing.T, got <-chan error, of string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter far back was not granted within 10s %s", of)
	}
}

// awaitQuiet waits until a waiter's statements (counted in writes) stop for a
// second — longer than a far waiter's longest pause while it paces, so it then
// listens — failing t after 20s.
func awaitQuiet(t *testing.T, writes *atomic.Int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for last, since := writes.Load(), time.Now(); time.Since(since) < time.Second; {
		if time.Now().After(deadline) {
			t.Fatal("the waiter far back still looks at the queue after 20s")
		}
		time.Sleep(10 * time.Millisecond) // polling its writes: there is no signal for it
		if w := writes.Load(); w != last {
			last, since = w, time.Now()
		}
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
