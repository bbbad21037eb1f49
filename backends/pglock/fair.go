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
	// fairMoved: with live waiters queued, also announce that the queue moves (to
	// far waiters that wait for it: movedPayload); appended to the release's
	// notification, whose text it extends by nothing.
	fairMoved = ` || COALESCE((SELECT pg_notify($3, 'm' || $4)::text FROM %s q
    WHERE q.lock_key = $1 AND q.deadline > statement_timestamp() LIMIT 1), '')`
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
	// enqueueSQL: arguments key, waiter, waiter TTL µs; returns the seq and how
	// many live waiters of the key were queued already (ahead of it).
	enqueueSQL = `INSERT INTO %[1]s (lock_key, waiter, deadline) VALUES ($1, $2, ` + "statement_timestamp() + $3::bigint * interval '1 microsecond'" + `)
RETURNING seq, (SELECT count(*) FROM %[1]s q WHERE q.lock_key = $1 AND q.deadline > statement_timestamp())`
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
// claims the lock whenever its turn may have come. A waiter near the head (fewer
// than nearHead live waiters ahead) listens: it is woken by a release addressed
// to it (or to the key: a release that found no one queued, or a client of an
// older dlock version, or a set's release), by the holder's time running out when
// it is first, and at least at every renewal of its place (every third of ttl),
// which also catches a waiter ahead that died. A waiter further back does not
// listen while the queue moves fast — PostgreSQL signals every listening session
// at each NOTIFY, so waiters that all listened would cost the server a
// transaction each per hand-off — but looks again when the queue should have
// brought it near, at the pace the queue has moved (pacer). Once the queue has
// stood still for standMin (long holds) it listens after all, as a near waiter
// does, and times the queue's moves (a release with waiters queued announces one:
// movedPayload); it looks and paces again once they come faster than standMin/2
// apart. A Locker whose last waiter listened so has its next one listen from
// the start. When ctx ends it leaves the queue (and gives back a lock granted to
// a request whose reply it did not wait for).
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
	us := micros(ttl)
	renewEvery := max(ttl/3, time.Millisecond)
	renewAt := time.Now().Add(renewEvery)
	ears := turnEars{h: d.hub, key: key, owner: me.owner, wait: min(renewEvery, time.Second)}
	defer ears.shut()
	// counting: far back, listening as if near (the queue moves slowly, so the
	// listening costs little) and timing the queue's moves. A Locker whose last
	// far waiter counted starts so, listening before it queues.
	counting := d.slowQueue.Load() && ears.listen(ctx, true)
	var seq, ahead int64
	if err := d.pool.QueryRow(ctx, fs.enqueue, me.key, me.owner, us).Scan(&seq, &ahead); err != nil {
		d.leave(me, fs, true)
		return nil, driver.WaitErr(ctx, fmt.Errorf("join the queue: %w", err))
	}
	pace := newPacer(time.Now(), ahead)
	if counting {
		pace.counting()
	}
	var remaining time.Duration
	look := ahead < nearHead // far back: wait before the first look
	for {
		if look || !time.Now().Before(renewAt) { // at each renewal at least
			// Near the head, or expected to be by now: listen before the look, so
			// that a turn announced after it is heard.
			if !ears.on && (ahead < nearHead || pace.expect(time.Now()) < nearHead/2) {
				ears.listen(ctx, false)
			}
			got, n, err := me.acquire(ctx, fs.claim, me.key, me.owner, us, me.owner, seq)
			var busy *driver.BusyError
			if !errors.As(err, &busy) {
				// Leave the queue whatever the claim answered; a granted lock is ours.
				d.leave(me, fs, err != nil)
				if err != nil {
					return nil, driver.WaitErr(ctx, err)
				}
				return got, nil
			}
			now := time.Now()
			listened := ears.on
			ahead, remaining = n, busy.Remaining
			pace.saw(ahead, now)
			switch {
			case ahead < nearHead:
				if counting { // near now: it waits for its turn, moves or not
					counting = false
					d.slowQueue.Store(!pace.fast())
				}
				if !listened && ears.listen(ctx, false) {
					continue // came near: listen, then look again
				}
			case counting && pace.fast():
				counting = false
				d.slowQueue.Store(false)
				ears.shut() // the queue moves fast again: pace
			case counting:
			case pace.standing(now):
				if ears.listen(ctx, true) {
					counting = true
					d.slowQueue.Store(true)
					pace.counting()
					continue // listen, then look again
				}
			default:
				ears.shut() // far back, the queue moving: no notifications
			}
		}
		look = true
		if time.Now().After(renewAt) {
			renewAt = time.Now().Add(renewEvery)
			tag, err := d.pool.Exec(ctx, fs.renew, me.owner, us)
			if err == nil && tag.RowsAffected() == 0 { // dropped (it did not renew in time): queue again
				if err = d.pool.QueryRow(ctx, fs.enqueue, me.key, me.owner, us).Scan(&seq, &ahead); err == nil {
					pace.saw(ahead, time.Now())
					continue // look at once from the new place
				}
			}
			if err != nil {
				d.leave(me, fs, true)
				return nil, driver.WaitErr(ctx, fmt.Errorf("renew the place in the queue: %w", err))
			}
		}
		pause := time.Until(renewAt)
		switch {
		case ahead >= nearHead && !counting:
			pause = min(pause, pace.pause(ahead))
		case !ears.on: // no notifications (off behind a pooler, or failed this time): poll
			pause = min(pause, pollPause(ahead))
		}
		if ahead == 0 && remaining > 0 {
			pause = min(pause, remaining+time.Millisecond) // expiry is not announced
		}
		t := time.NewTimer(max(pause, time.Millisecond))
		select {
		case <-t.C:
		case <-ears.turn:
		case <-ears.keyTurn:
		case <-ears.moves:
			// A move: counting far back, look (to pace again) only once they come
			// fast; near the head, wait for the turn.
			look = counting && pace.count(time.Now())
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			d.leave(me, fs, true)
			return nil, ctx.Err()
		}
	}
}

// nearHead: a queued waiter with fewer live waiters than this ahead of it listens
// for its turn; one further back paces its looks. The waiters near the head are
// the slack for a far waiter's pace: the queue must move nearHead places faster
// than it did for a waiter to find its turn come while it was not listening.
const nearHead = 10

// movedPayload is the notification payload that announces a release of key's
// lock while waiters are queued: the queue moves. Waiters far back listen for it
// while the queue moves slowly; its own expression in SQL is 'm' || $4.
func movedPayload(key string) string { return "m" + keyPayload(key) }

// turnEars are a queued waiter's subscriptions: to its turn and to its key's
// releases, and while it counts them, to the queue's moves. They cost the server
// the same whichever payloads they name: PostgreSQL signals a listening session
// at every notification on the channel.
type turnEars struct {
	h     *hub
	key   string
	owner pgtype.UUID
	wait  time.Duration // how long a subscription may take before the waiter polls instead

	on                   bool      // subscribed
	retryAt              time.Time // after a failed subscription, the waiter polls until then
	turn, keyTurn, moves <-chan struct{}
	stops                []func()
}

// listen subscribes to the turn and the key's releases, and with moves to the
// queue's moves too, unless it is already; it reports whether the waiter listens.
// A subscription that fails (notifications off behind a pooler, or the listening
// connection not ready within wait) leaves the waiter unsubscribed, polling, and
// not trying again for wait.
func (e *turnEars) listen(ctx context.Context, moves bool) bool {
	if e.on && (e.moves != nil || !moves) {
		return true
	}
	if time.Now().Before(e.retryAt) {
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, e.wait)
	defer cancel()
	ok := true
	sub := func(payload string) <-chan struct{} {
		w, stop, err := e.h.subscribe(sctx, payload)
		if err != nil {
			ok = false
			return nil
		}
		e.stops = append(e.stops, stop)
		return w
	}
	if !e.on {
		e.turn, e.keyTurn = sub(waiterPayload(e.owner)), sub(keyPayload(e.key))
		e.on = true
	}
	if moves && ok {
		e.moves = sub(movedPayload(e.key))
	}
	if !ok {
		e.shut()
		e.retryAt = time.Now().Add(e.wait)
	}
	return ok
}

// shut ends the subscriptions (the hub leaves the channel once no waiter of its
// Locker listens).
func (e *turnEars) shut() {
	for _, stop := range e.stops {
		stop()
	}
	e.on, e.turn, e.keyTurn, e.moves, e.stops = false, nil, nil, nil, nil
}

// pacer paces a waiter far back in the queue by how fast the queue moves: it
// sleeps paceShare of the time the queue should take to bring it halfway into
// the waiters near the head, so it looks a few times while it moves up and comes
// near, where it listens, well before its turn. The time per hand-off is this
// wait's own estimate: measured between its looks that found the queue moved
// (over the interval since the look before, so a standstill before that look does
// not count), or between the moves it heard while it listened; too long an
// estimate has the waiter sleep through its turn (the queue stalls until it
// looks), too short one costs a look, so one look's measure at most halves it or
// raises it by an eighth. The queue stands when a look found it where the look
// before (or the enqueue) did and it has not moved for standMin.
type pacer struct {
	per   time.Duration // the time per hand-off, as estimated
	look  time.Time     // the last look (or the enqueue)
	ahead int64         // what it found
	moved time.Time     // when a look last found the queue moved (or the waiter queued)
	stuck bool          // the last look found the queue where the one before (or the enqueue) did
	heard time.Time     // the last move heard while listening; zero: none yet
}

const (
	// paceShare is the share of the time the queue should take to bring a far
	// waiter halfway into the waiters near the head that it sleeps.
	paceShare = 0.8
	// maxQueuePause bounds a far waiter's pause: a turn that came sooner than
	// the pace said (waiters ahead left) waits that long at most.
	maxQueuePause = 256 * time.Millisecond
	// standMin: how long the queue must not have moved for a far waiter to listen;
	// a listening far waiter goes back to pacing when the moves come faster than
	// half of it apart.
	standMin = 50 * time.Millisecond
)

func newPacer(now time.Time, ahead int64) pacer {
	return pacer{per: time.Millisecond, look: now, ahead: ahead, moved: now}
}

// saw records a look that found ahead waiters ahead at now.
func (p *pacer) saw(ahead int64, now time.Time) {
	switch {
	case ahead < p.ahead:
		m := now.Sub(p.look) / time.Duration(p.ahead-ahead)
		p.per = max(min(m, p.per+p.per/8), p.per/2, time.Microsecond)
		p.moved, p.stuck = now, false
	case ahead == p.ahead:
		p.stuck = true
	default: // queued again, further back
		p.moved, p.stuck = now, false
	}
	p.look, p.ahead = now, ahead
}

// counting starts timing the moves heard: the queue stood still, so it is taken
// to move slowly until the moves heard say otherwise.
func (p *pacer) counting() {
	p.per, p.heard = max(p.per, standMin), time.Time{}
}

// count records a move heard at now and reports whether the moves come fast
// enough again for pacing.
func (p *pacer) count(now time.Time) bool {
	if !p.heard.IsZero() {
		p.per = max((3*p.per+now.Sub(p.heard))/4, time.Microsecond)
	}
	p.heard = now
	return p.fast()
}

// standing reports whether the queue stands still.
func (p *pacer) standing(now time.Time) bool {
	return p.stuck && now.Sub(p.moved) > standMin
}

// fast reports whether the queue moves fast enough again for pacing.
func (p *pacer) fast() bool { return p.per < standMin/2 }

// expect is how many waiters should be ahead at now, at the pace.
func (p *pacer) expect(now time.Time) int64 {
	return p.ahead - int64(now.Sub(p.look)/p.per)
}

// pause is how long a waiter with ahead waiters ahead waits before it looks.
func (p *pacer) pause(ahead int64) time.Duration {
	far := float64(ahead - nearHead/2)
	return min(max(time.Duration(paceShare*far*float64(p.per)), time.Millisecond), maxQueuePause)
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
