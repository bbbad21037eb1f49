package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/driver"
)

// The default mode's bounded wait. Waiters poll (the database announces nothing),
// and a client that releases a key and asks again at once finds it free before a
// waiter's next look: without more, such clients pass a waiter over for as long as
// they keep asking (TestLongWaiterIsNotPassedOver: thousands of times). So an
// Acquire that has waited claimAfter joins the fair mode's queue (the queue table)
// and waits there as a WithFIFO Acquire does, and each look of a queued waiter
// claims the key in its row (claim_until) for claimTTL: while a claim lasts, the
// one-statement fast path (acquireSQL, takeSQL) does not take a free key, and the
// first queued waiter takes it at its next look. A grant leaves the claim in place
// when other waiters are queued, so the claim is handed on with the key: the
// client that just released cannot take it back while anyone who has waited
// claimAfter waits. Waits shorter than claimAfter cost what they cost before: the
// key goes to whoever asks first, in one statement. So the default mode's grants
// are in arrival order among those who have waited claimAfter, and the fast path
// stays that of an uncontended key (WithFIFO's try also reads the queue table).

// claimAfter is how long an Acquire polls before it joins the queue: a wait this
// short costs no queue row, and a barging client passes a waiter over during it only.
const claimAfter = 2 * time.Millisecond

// claimTTL is how long a claim lasts past the last look of a queued waiter: an
// Acquire that ended without a word (its process killed, its network cut) keeps
// others from a free key at most this long past its last look (and it stays in
// the queue until its row's deadline, as in the fair mode). The first waiter looks
// at most 64ms apart, the others at most maxQueuePause, so it is renewed several
// times within it.
const claimTTL = 250 * time.Millisecond

// maxPollPause bounds the pause between two looks of an Acquire that does not
// queue (a table without claim columns or queue table), as dlock.DefaultRetry does.
const maxPollPause = 250 * time.Millisecond

// claimLook is the queued look of the default mode: fairAcquireSQL with fairMine
// and the ahead count, which also sets the key's claim: ended by a grant when no
// other live waiter is queued, renewed for claimTTL (%[3]d µs) otherwise. The
// assignment runs after owner's, so "owner = ?" tells a grant. %[1]s is the lock
// table, %[2]s the queue table. Extra arguments: owner, key, owner.
const claimLook = `,
  claim_until = IF(owner = ? AND NOT EXISTS (SELECT 1 FROM %[2]s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6) AND waiter <> ?),
    ` + freeAt + `, UTC_TIMESTAMP(6) + INTERVAL %[3]d MICROSECOND)`

// unclaimSQL ends the key's claim when no live waiter is queued: run by a waiter
// that left the queue without the key. Arguments: key, key.
const unclaimSQL = `UPDATE %[1]s SET claim_until = ` + freeAt + `
WHERE lock_key = ? AND NOT EXISTS (SELECT 1 FROM %[2]s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6))`

var _ driver.Waiter = (*tableDriver)(nil)

// Lock takes the key, waiting until ctx ends. It tries at once; while the key is
// held it looks again after a random pause that doubles up to 250ms (cut to the
// holder's remaining time, and to claimAfter), and from claimAfter on it joins the
// queue and waits as WithFIFO's Lock does, claiming the key at each look. When ctx
// ends it leaves the queue, ends the claim if no one else is queued, and gives back
// a lock granted to a request whose reply it did not wait for. On a table without
// the claim columns or the queue table it only polls.
func (d *tableDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	start := time.Now()
	lk, me, busy, err := d.firstTry(ctx, key, ttl, d.TryLock)
	if me == nil {
		return lk, err
	}
	queues := me.s.queue != nil
	remaining := busyTime(busy)
	for attempt := 1; ; attempt++ {
		waited := time.Since(start)
		if queues && waited >= claimAfter {
			return d.queueWait(ctx, me, ttl)
		}
		p := jitter(attempt, maxPollPause)
		if queues {
			p = min(p, claimAfter-waited) // queue as soon as it may
		}
		if remaining > 0 {
			p = min(p, remaining+time.Millisecond)
		}
		t := time.NewTimer(max(p, time.Millisecond))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		lk, err := d.TryLock(ctx, key, ttl)
		if err == nil || !isBusy(err) {
			return lk, driver.WaitErr(ctx, err)
		}
		remaining = busyTime(err)
	}
}

// firstTry is a waiting Lock's first step: try (the mode's TryLock) once, and when
// the key is busy a new lock to wait with (me) and the Busy error. Otherwise me is
// nil and lk, err are Lock's answer.
func (d *tableDriver) firstTry(ctx context.Context, key string, ttl time.Duration,
	try func(context.Context, string, time.Duration) (driver.Lock, error)) (lk driver.Lock, me *tableLock, busy, err error) {
	lk, err = try(ctx, key, ttl)
	if err == nil || !isBusy(err) {
		return lk, nil, nil, driver.WaitErr(ctx, err)
	}
	busy = err
	if me, err = d.newLock(ctx, key); err != nil {
		return nil, nil, nil, err
	}
	return nil, me, busy, nil
}

// jitter is a random pause in [0, 1ms·2^(attempt-1)], at most ceiling: full jitter,
// as dlock.ExponentialBackoff.
func jitter(attempt int, ceiling time.Duration) time.Duration {
	bound := min(time.Millisecond<<min(attempt-1, 20), ceiling)
	return time.Duration(mrand.Int64N(int64(bound) + 1))
}

// busyTime returns the remaining time of a driver.Busy error (0 if none).
func busyTime(err error) time.Duration {
	var b *driver.BusyError
	if errors.As(err, &b) {
		return b.Remaining
	}
	return 0
}

// erBadField is MySQL's ER_BAD_FIELD_ERROR: a statement names a column the table
// does not have.
const erBadField = 1054

func isBadField(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erBadField
}

// erDupFieldName is MySQL's ER_DUP_FIELDNAME: the column is there already.
const erDupFieldName = 1060

// migrateClaims adds the claim columns to a lock table made before they existed
// (another process may add them at the same time: a column that is there already
// is not an error).
func migrateClaims(ctx context.Context, db *sql.DB, table string) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'claim_until'`, table).Scan(&n)
	if err != nil {
		return fmt.Errorf("look for the claim columns of table %s: %w", quoteIdent(table), err)
	}
	if n > 0 {
		return nil
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN "+claimerColumn+", ADD COLUMN "+claimSinceColumn+", ADD COLUMN "+claimUntilColumn, quoteIdent(table)))
	var me *mysql.MySQLError
	if err != nil && !(errors.As(err, &me) && me.Number == erDupFieldName) {
		return claimsNotAdded{fmt.Errorf("add the claim columns to table %s: %w", quoteIdent(table), err)}
	}
	return nil
}

// claimsNotAdded is migrateClaims' failure to add the columns to an existing table
// (e.g. no ALTER privilege). Migrate returns it; a Locker WithMigrate goes on
// without claims, as on any table without the columns.
type claimsNotAdded struct{ error }

func (e claimsNotAdded) Unwrap() error { return e.error }
