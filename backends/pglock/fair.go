package pglock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock/driver"
)

// The queue (both modes of New): waiters queue in a second table, each row with a
// deadline it renews every third of its TTL, so a waiter that crashed stops
// counting at its deadline. A release notifies the first live waiter alone (its own
// payload), so a hand-off costs the same few statements however long the queue.
//
// The fair mode (WithFIFO) grants the lock in the queue's order. The default mode
// lets a caller take a free lock ahead of waiters that queued less than the barging
// window ago (bargeWindow, by the database's clock) — the holder that releases and
// asks again keeps going without a hand-off — but not ahead of one that has waited
// longer, so barging is bounded. A database whose queue table predates the default
// mode's use of it (no since column) gets the default mode as it was: every waiter
// listens for the key's releases (oldDefault).

// QueueSuffix is appended to the lock table's name to name its queue table.
const QueueSuffix = "_queue"

// QueueTable is the name of the waiters' queue table (both modes of New) that goes
// with the lock table named table.
func QueueTable(table string) string { return table + QueueSuffix }

// createQueue: seq orders the waiters (later rows get larger numbers), waiter is
// the owner value the waiter will lock with, since when it queued (by the
// database's clock; the default mode's barging window counts from it). %[2]s names
// the index.
const createQueue = `CREATE TABLE IF NOT EXISTS %[1]s (
  seq      bigserial PRIMARY KEY,
  lock_key bytea NOT NULL,
  waiter   uuid NOT NULL UNIQUE,
  deadline timestamptz NOT NULL,
  since    timestamptz NOT NULL DEFAULT statement_timestamp()
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (lock_key, seq)`

// addSince gives a queue table made before the default mode queued (by a dlock
// version whose fair mode alone used it) its since column; rows already queued
// count as queued when it ran.
const addSince = `ALTER TABLE %s ADD COLUMN IF NOT EXISTS since timestamptz NOT NULL DEFAULT statement_timestamp()`

// hasSinceSQL reports whether the queue table ($1, quoted) exists with its since
// column.
const hasSinceSQL = `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'since' AND NOT attisdropped)`

// queueUsableSQL reports whether the default mode can queue in the queue table
// ($1, quoted): it exists with its since column, and the user may read, insert,
// update and delete its rows and use its sequence. (has_table_privilege with a
// list of privileges answers whether any is held: each is asked alone.)
const queueUsableSQL = `SELECT COALESCE((SELECT has_table_privilege(c, 'SELECT') AND has_table_privilege(c, 'INSERT')
  AND has_table_privilege(c, 'UPDATE') AND has_table_privilege(c, 'DELETE')
  AND has_sequence_privilege(pg_get_serial_sequence($1, 'seq'), 'USAGE')
  AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c AND attname = 'since' AND NOT attisdropped)
  FROM to_regclass($1) AS c WHERE c IS NOT NULL), false)`

// bargeWindow is the default mode's barging window: a waiter that has queued this
// long (by the database's clock) is served before anyone who asks after it.
const bargeWindow = 2 * time.Millisecond

// The conditions of a take-over with the queue (acquireSQL's extra condition), and
// what a release notifies. %s (%[1]s) is the queue table; a live waiter is one
// whose deadline has not passed by the server's clock.
const (
	// fairFree: no one waits (TryAcquire).
	fairFree = `
    AND NOT EXISTS (SELECT 1 FROM %s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp())`
	// fairMine: the caller ($4) is the first live waiter.
	fairMine = `
    AND (SELECT q.waiter FROM %s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp() ORDER BY q.seq LIMIT 1) = $4`
	// fairNext: the payload that wakes the first live waiter, or the key's waiters
	// when none is queued ($4).
	fairNext = `COALESCE((SELECT 'w' || q.waiter::text FROM %s q
    WHERE q.lock_key = $1 AND q.deadline > statement_timestamp() ORDER BY q.seq LIMIT 1), $4)`
	// bargeFree: no live waiter has waited the barging window (%[2]d µs; the
	// default mode's TryAcquire).
	bargeFree = `
    AND NOT EXISTS (SELECT 1 FROM %[1]s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp()
      AND q.since <= statement_timestamp() - %[2]d * interval '1 microsecond')`
	// bargeMine: no live waiter ahead of the caller ($4, its seq $5) has waited the
	// barging window (the default mode's claim).
	bargeMine = `
    AND NOT EXISTS (SELECT 1 FROM %[1]s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp()
      AND q.since <= statement_timestamp() - %[2]d * interval '1 microsecond' AND q.seq < $5 AND q.waiter <> $4)`
	// fairAhead: how many live waiters are ahead of the caller's seq ($5).
	fairAhead = `(SELECT count(*) FROM %s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp() AND q.seq < $5)`
)

// The queue's statements. %s is the queue table.
const (
	// enqueueSQL: arguments key, waiter, waiter TTL µs; returns the seq.
	enqueueSQL = `INSERT INTO %s (lock_key, waiter, deadline) VALUES ($1, $2, ` + "statement_timestamp() + $3::bigint * interval '1 microsecond'" + `) RETURNING seq`
	// renewSQL: arguments waiter, waiter TTL µs.
	renewSQL = `UPDATE %s SET deadline = statement_timestamp() + $2::bigint * interval '1 microsecond' WHERE waiter = $1`
	// dequeueSQL drops the waiter's row and the key's rows whose deadline passed,
	// and, if $4, wakes the waiter that is now first (a waiter that leaves without
	// the lock may have been woken in its place). Arguments: waiter, key, channel,
	// wake.
	dequeueSQL = `WITH gone AS (DELETE FROM %[1]s WHERE waiter = $1 OR (lock_key = $2 AND deadline <= statement_timestamp()))
SELECT pg_notify($3, 'w' || q.waiter::text)::text FROM %[1]s q
WHERE $4::boolean AND q.lock_key = $2 AND q.deadline > statement_timestamp() AND q.waiter <> $1 ORDER BY q.seq LIMIT 1`
)

// waiterPayload is the notification payload that tells the waiter owner its turn
// came: "w" and the owner as PostgreSQL writes a uuid.
func waiterPayload(owner pgtype.UUID) string {
	h := hex.EncodeToString(owner.Bytes[:])
	return "w" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// fairStatements are the queue's statements for one table.
type fairStatements struct {
	claim, enqueue, renew, dequeue string
}

// newFairStatements formats the queue's statements for table; fifo picks the fair
// mode's claim, else the default mode's.
func newFairStatements(table string, fifo bool) fairStatements {
	t, q := quoteIdent(table), quoteIdent(QueueTable(table))
	mine := fmt.Sprintf(bargeMine, q, bargeWindow.Microseconds())
	if fifo {
		mine = fmt.Sprintf(fairMine, q)
	}
	return fairStatements{
		// claim: acquireSQL with the mode's condition, whose busy answer says how
		// many wait ahead.
		claim:   fmt.Sprintf(acquireSQL, t, mine, fmt.Sprintf(fairAhead, q)),
		enqueue: fmt.Sprintf(enqueueSQL, q),
		renew:   fmt.Sprintf(renewSQL, q),
		dequeue: fmt.Sprintf(dequeueSQL, q),
	}
}

// fairDriver is New's driver (both modes): TryLock takes the lock only when no one
// waits (WithFIFO: acquireSQL with fairFree) or no one has waited the barging
// window (bargeFree); Lock queues.
type fairDriver struct{ *tableDriver }

var _ driver.Waiter = fairDriver{}

// Lock tries once; when the lock is held or others wait it joins the queue and
// claims the lock whenever its turn may have come: woken by a release addressed to
// it (or to the key: a release that found no one queued, or a client of an older
// dlock version, or a set's release), by the holder's time running out when it is
// first, and at least at every renewal of its place (every third of ttl), which
// also catches a waiter ahead that died. When ctx ends it leaves the queue (and
// gives back a lock granted to a request whose reply it did not wait for).
func (d fairDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, err := d.TryLock(ctx, key, ttl)
	if err == nil || !isBusy(err) {
		return lk, driver.WaitErr(ctx, err)
	}
	if d.oldDefault.Load() {
		return d.waitOld(ctx, key, ttl)
	}
	me, err := d.newLock(ctx, key)
	if err != nil {
		return nil, err
	}
	fs := d.fair
	// Listen before queueing: a release after the enqueue is heard.
	var wake, keyWake <-chan struct{}
	if w, stop, err := d.hub.subscribe(ctx, waiterPayload(me.owner)); err == nil {
		defer stop()
		wake = w
	}
	if w, stop, err := d.hub.subscribe(ctx, keyPayload(key)); err == nil {
		defer stop()
		keyWake = w
	}
	us := micros(ttl)
	var seq int64
	if err := d.pool.QueryRow(ctx, fs.enqueue, me.key, me.owner, us).Scan(&seq); err != nil {
		d.leave(me, fs, true)
		return nil, driver.WaitErr(ctx, fmt.Errorf("join the queue: %w", err))
	}
	renewEvery := max(ttl/3, time.Millisecond)
	renewAt := time.Now().Add(renewEvery)
	for {
		got, ahead, err := me.acquire(ctx, fs.claim, me.key, me.owner, us, me.owner, seq)
		var busy *driver.BusyError
		if !errors.As(err, &busy) {
			// Leave the queue whatever the claim answered; a granted lock is ours.
			d.leave(me, fs, err != nil)
			if err != nil {
				return nil, driver.WaitErr(ctx, err)
			}
			return got, nil
		}
		remaining := busy.Remaining
		if time.Now().After(renewAt) {
			renewAt = time.Now().Add(renewEvery)
			tag, err := d.pool.Exec(ctx, fs.renew, me.owner, us)
			if err == nil && tag.RowsAffected() == 0 { // dropped (it did not renew in time): queue again
				err = d.pool.QueryRow(ctx, fs.enqueue, me.key, me.owner, us).Scan(&seq)
			}
			if err != nil {
				d.leave(me, fs, true)
				return nil, driver.WaitErr(ctx, fmt.Errorf("renew the place in the queue: %w", err))
			}
		}
		pause := time.Until(renewAt)
		if ahead == 0 && remaining > 0 {
			pause = min(pause, remaining+time.Millisecond) // expiry is not announced
		}
		if wake == nil { // no notifications: poll
			pause = min(pause, pollPause(ahead))
		}
		t := time.NewTimer(max(pause, time.Millisecond))
		select {
		case <-t.C:
		case <-wake:
		case <-keyWake:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			d.leave(me, fs, true)
			return nil, ctx.Err()
		}
	}
}

// waitOld is the default mode's wait on a database without the queue's since column
// (oldDefault): it listens for key's releases and tries again at once (a release
// before it listened was not heard), at each release announced, and when the
// holder's time is up; without notifications it polls. When ctx ends it returns; a
// try cut off by ctx frees what it took (tableLock.acquire).
func (d fairDriver) waitOld(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	wake, stop, err := d.Subscribe(ctx, key)
	if err == nil {
		defer stop()
	}
	for {
		lk, err := d.TryLock(ctx, key, ttl)
		var b *driver.BusyError
		if !errors.As(err, &b) {
			return lk, driver.WaitErr(ctx, err)
		}
		pause := b.Remaining + time.Millisecond
		if wake == nil || b.Remaining == 0 { // no notifications, or the holder's time unknown
			pause = pollPause(2)
			if b.Remaining > 0 {
				pause = min(pause, b.Remaining+time.Millisecond)
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// pollPause is how long a queued waiter without notifications waits before it
// looks again: often at the head, less often the further back it is.
func pollPause(ahead int64) time.Duration {
	return min(2*time.Millisecond<<min(ahead, 7), 256*time.Millisecond)
}

// leave takes the waiter out of the queue — waking the waiter now first unless
// this one leaves with the lock (wake false) — and, leaving without it, frees the
// lock if a request whose reply it did not wait for took it; best effort, with a
// fresh bounded context.
func (d fairDriver) leave(l *tableLock, fs fairStatements, wake bool) {
	ctx, cancel := context.WithTimeout(context.Background(), tidyTimeout)
	defer cancel()
	_, _ = d.pool.Exec(ctx, fs.dequeue, l.owner, l.key, d.hub.channel, wake)
	if wake {
		_, _ = d.pool.Exec(ctx, d.s().tidy, l.key, l.owner)
	}
}

func isBusy(err error) bool {
	var b *driver.BusyError
	return errors.As(err, &b)
}
