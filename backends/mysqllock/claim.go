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
// Acquire that has waited claimAfter claims the key in its row (claimColumns);
// while the claim lasts, a free key goes to no one but the claimer (and Acquires
// that began to wait before it), and the claim goes to the Acquire that began to
// wait first. The claimer looks often; the others that have waited claimAfter look
// the less often the later they began to wait than the claimer, so that the looks
// per hand-off do not grow with their number. Waits shorter than claimAfter cost
// what they cost before: the key goes to whoever asks first, in one statement.
// This bounds how often a waiter is passed over without the fair mode's order (or
// its cost): the claim is not handed on, so between a claimer's grant and the next
// claim a client that asks may still take the key first.

// claimAfter is how long an Acquire waits before it claims the key: a wait this
// short costs no claim, and a barging client passes a waiter over during it only.
const claimAfter = 10 * time.Millisecond

// claimTTL is how long a claim lasts without a look of its claimer: an Acquire
// that ended without a word (its process killed, its network cut) keeps others
// from a free key at most this long. Its claimer looks at most maxClaimerPause
// apart, so it renews the claim several times within it.
const claimTTL = 250 * time.Millisecond

// maxClaimerPause bounds the pause of the claimer between two looks: the key is
// handed to it at most this long after its release. maxClaimWaitPause bounds that
// of the other Acquires that have waited claimAfter.
const (
	maxClaimerPause   = 64 * time.Millisecond
	maxClaimWaitPause = 256 * time.Millisecond
)

// maxPollPause bounds the pause between two looks of an Acquire on a table without
// claim columns, as dlock.DefaultRetry does.
const maxPollPause = 250 * time.Millisecond

// unclaimSQL ends the caller's claim on the key. Arguments: key, owner.
const unclaimSQL = `UPDATE %s SET claim_until = ` + freeAt + ` WHERE lock_key = ? AND claimer = ?`

var _ driver.Waiter = (*tableDriver)(nil)

// Lock takes the key, waiting until ctx ends. It tries at once; while the key is
// held it looks again after a random pause that doubles up to 250ms (cut to the
// holder's remaining time), and from claimAfter on with waitSQL, which claims the
// key for the Acquire that began to wait first: the claimer looks 1ms after, then
// doubling up to maxClaimerPause, and gets the key at its first look after the
// release; another looks after about as long as the claimer had waited before it
// began to (at least 2ms, at most maxClaimWaitPause). When ctx ends it ends its
// claim (and gives back a lock granted to a request whose reply it did not wait
// for). On a table without claim columns it only polls.
func (d *tableDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	start := time.Now()
	lk, me, busy, err := d.firstTry(ctx, key, ttl, d.TryLock)
	if me == nil {
		return lk, err
	}
	w := waiting{remaining: busyTime(busy)}
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(w.pause(attempt, time.Since(start), me.s.wait != nil))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			if w.claimer {
				d.unclaim(me)
			}
			return nil, ctx.Err()
		}
		if me.s.wait == nil || time.Since(start) < claimAfter {
			lk, err := d.TryLock(ctx, key, ttl)
			if err == nil || !isBusy(err) {
				return lk, driver.WaitErr(ctx, err)
			}
			w.remaining = busyTime(err)
			continue
		}
		lk, err := me.look(ctx, ttl, time.Since(start), &w)
		if err == nil || !isBusy(err) {
			if err != nil && w.claimer {
				d.unclaim(me)
			}
			return lk, driver.WaitErr(ctx, err)
		}
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

// waiting is what an Acquire learnt at its last look.
type waiting struct {
	remaining time.Duration // the holder's remaining time (0: unknown, or free but claimed)
	claimer   bool          // the key's claim is this Acquire's
	claimed   int           // looks since it holds the claim
	behind    time.Duration // how much later it began to wait than the claimer
}

// pause returns how long to wait before look attempt, after waited.
func (w *waiting) pause(attempt int, waited time.Duration, claims bool) time.Duration {
	var p time.Duration
	switch {
	case w.claimer:
		p = min(time.Millisecond<<min(w.claimed, 6), maxClaimerPause)
	case claims && waited >= claimAfter:
		// Its turn comes after those that began to wait before it, about as
		// many hand-offs as there are of them, and they began about behind
		// earlier: look again after about that long.
		p = min(max(w.behind, 2*time.Millisecond), maxClaimWaitPause)
	default:
		p = jitter(attempt, maxPollPause)
		if claims {
			p = min(p, claimAfter-waited) // claim as soon as it may
		}
	}
	if w.remaining > 0 {
		p = min(p, w.remaining+time.Millisecond)
	}
	return max(p, time.Millisecond)
}

// jitter is a random pause in [0, 1ms·2^(attempt-1)], at most ceiling: full jitter,
// as dlock.ExponentialBackoff.
func jitter(attempt int, ceiling time.Duration) time.Duration {
	bound := min(time.Millisecond<<min(attempt-1, 20), ceiling)
	return time.Duration(mrand.Int64N(int64(bound) + 1))
}

// look is one waitSQL of l's Acquire, which has waited waited: l's lock, or Busy,
// with w updated.
func (l *tableLock) look(ctx context.Context, ttl, waited time.Duration, w *waiting) (driver.Lock, error) {
	sctx, done := graced(ctx)
	defer done()
	us, o := micros(ttl), l.owner[:]
	l.validFrom = time.Now()
	w8 := micros(waited)
	res, err := exec(sctx, l.s.wait, l.key, o, us, o, w8, o, w8, o, o, us, o, o, w8, o, o, o, w8, o, o, o, w8)
	if err == nil {
		var id int64
		if id, err = res.LastInsertId(); err == nil && id&busyFlag != 0 {
			if id&claimBit != 0 {
				w.claimed++
			} else {
				w.claimed = 0
			}
			w.claimer = id&claimBit != 0
			v := id &^ (busyFlag | claimBit)
			w.behind = time.Duration(v>>aheadShift) * time.Millisecond
			w.remaining = time.Duration(v&(1<<aheadShift-1)) * time.Microsecond
			return nil, driver.Busy(w.remaining)
		}
	}
	return l.settled(ctx, sctx, res, err)
}

// unclaim ends l's claim on its key, best effort (a claim left behind ends at its
// claim_until), with a fresh short context: it runs when the caller's ctx ended.
func (d *tableDriver) unclaim(l *tableLock) {
	ctx, cancel := context.WithTimeout(context.Background(), tidyTimeout)
	defer cancel()
	_, _ = exec(ctx, l.s.unclaim, l.key, l.owner[:])
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
