package mysqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// The fair mode (WithFIFO): the table's lock, granted in arrival order from a queue of
// waiters kept in a second table (the lock table's name + "_queue"). Each waiter's
// row has a deadline it renews every third of its TTL, so a waiter that crashed stops
// counting at its deadline. The default mode queues in the same table the Acquires
// that have waited claimAfter (claim.go).

// QueueSuffix is appended to the lock table's name to name its queue table.
const QueueSuffix = "_queue"

// createQueue: seq orders the waiters (AUTO_INCREMENT: later rows get larger
// numbers), waiter is the owner value the waiter will lock with.
const createQueue = `CREATE TABLE IF NOT EXISTS %s (
  seq      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  lock_key VARBINARY(255) NOT NULL,
  waiter   BINARY(16) NOT NULL,
  deadline DATETIME(6) NOT NULL,
  PRIMARY KEY (seq),
  UNIQUE KEY (waiter),
  KEY (lock_key, seq)
) ENGINE=InnoDB`

// The condition under which the fair statements take the lock, and what they return
// otherwise. %[1]s is the lock table, %[2]s the queue table. A live waiter is one
// whose deadline has not passed by the server's clock.
const (
	// fairFree: the lock is free and no one waits. Argument: key.
	fairFree = `expires_at <= UTC_TIMESTAMP(6) AND NOT EXISTS (SELECT 1 FROM %[2]s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6))`
	// fairMine: the lock is free and the caller is the first live waiter.
	// Arguments: key, waiter.
	fairMine = `expires_at <= UTC_TIMESTAMP(6) AND (SELECT waiter FROM %[2]s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6) ORDER BY seq LIMIT 1) = ?`
	// fairAhead: how many live waiters are ahead of the caller's seq. Arguments: key, seq.
	fairAhead = `(SELECT COUNT(*) FROM %[2]s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6) AND seq < ?)`
)

// fairAcquireSQL is acquireSQL with cond (fairFree or fairMine) deciding the grant.
// The busy answer in LAST_INSERT_ID is busyFlag + ahead×2^40 + the holder's remaining
// microseconds (at most 2^40−1). %[6]s is more assignments (the default mode's
// claimLook, or none). Arguments: key, owner, ttl µs, cond's, ahead's, cond's,
// owner, owner, ttl µs, and those of %[6]s.
const fairAcquireSQL = `INSERT INTO %[1]s (lock_key, owner, token, expires_at)
VALUES (?, ?, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
  token = IF(%[3]s,
             LAST_INSERT_ID(token + 1),
             token + LEAST(0, LAST_INSERT_ID(%[5]d + LEAST(%[4]s, 2097151) * 1099511627776 +
               LEAST(GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0), 1099511627775)))),
  owner = IF(%[3]s, ?, owner),
  expires_at = IF(owner = ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)%[6]s`

// The queue's statements. %s is the queue table.
const (
	// enqueueSQL: arguments key, waiter, waiter TTL µs; LAST_INSERT_ID is the seq.
	enqueueSQL = `INSERT INTO %s (lock_key, waiter, deadline) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`
	// renewSQL: arguments waiter TTL µs, waiter.
	renewSQL = `UPDATE %s SET deadline = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE waiter = ?`
	// dequeueSQL drops the waiter's row and the key's rows whose deadline passed.
	// Arguments: waiter, key.
	dequeueSQL = `DELETE FROM %s WHERE waiter = ? OR (lock_key = ? AND deadline <= UTC_TIMESTAMP(6))`
)

// peekSQL is the look of a WithFIFO waiter behind the second: how many live waiters
// are ahead of its seq, and the holder's remaining µs — a plain read, which takes no
// row lock, where fairAcquireSQL's look locks the key's row and so queues behind
// every other look, the holder's release and the first waiter's claim. %[1]s is the
// lock table, %[2]s the queue table. Arguments: key, seq, key.
const peekSQL = `SELECT ` + fairAhead + `,
  COALESCE((SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0) FROM %[1]s WHERE lock_key = ?), 0)`

// aheadShift is where the busy answer of fairAcquireSQL keeps the waiters ahead.
const aheadShift = 40

// queueStatements are the statements of a queued waiter: look (the claim of the
// first waiter), and those of its row. try is WithFIFO's TryLock and peek the look
// of its waiters behind the second (both nil in the default mode, whose looks also
// renew the key's claim), unclaim the default mode's end of a claim (nil with
// WithFIFO).
type queueStatements struct{ try, look, peek, enqueue, renew, dequeue, unclaim *sql.Stmt }

func (s *queueStatements) list() []*sql.Stmt {
	return []*sql.Stmt{s.try, s.look, s.peek, s.enqueue, s.renew, s.dequeue, s.unclaim}
}

// prepareQueue prepares the queue's statements on the tables t and q (quoted): the
// fair mode's with fifo, else the default mode's (whose looks claim the key).
func prepareQueue(ctx context.Context, db *sql.DB, t, q string, fifo bool) (*queueStatements, error) {
	var s queueStatements
	var err error
	prep := func(dst **sql.Stmt, query string) {
		if err == nil {
			*dst, err = db.PrepareContext(ctx, query)
		}
	}
	mine, ahead := fmt.Sprintf(fairMine, t, q), fmt.Sprintf(fairAhead, t, q)
	if fifo {
		prep(&s.try, fmt.Sprintf(fairAcquireSQL, t, q, fmt.Sprintf(fairFree, t, q), "0", busyFlag, ""))
		prep(&s.look, fmt.Sprintf(fairAcquireSQL, t, q, mine, ahead, busyFlag, ""))
		prep(&s.peek, fmt.Sprintf(peekSQL, t, q))
	} else {
		prep(&s.look, fmt.Sprintf(fairAcquireSQL, t, q, mine, ahead, busyFlag, fmt.Sprintf(claimLook, t, q, claimTTL.Microseconds())))
		prep(&s.unclaim, fmt.Sprintf(unclaimSQL, t, q))
	}
	prep(&s.enqueue, fmt.Sprintf(enqueueSQL, q))
	prep(&s.renew, fmt.Sprintf(renewSQL, q))
	prep(&s.dequeue, fmt.Sprintf(dequeueSQL, q))
	if err != nil {
		s.close()
		return nil, err
	}
	return &s, nil
}

func (s *queueStatements) close() {
	for _, st := range s.list() {
		if st != nil {
			st.Close()
		}
	}
}

// fairTableDriver is New with WithFIFO.
type fairTableDriver struct{ *tableDriver }

var _ driver.Waiter = fairTableDriver{}

// TryLock takes the lock only if it is free and no one waits.
func (d fairTableDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, err := d.newLock(ctx, key)
	if err != nil {
		return nil, err
	}
	s := lk.s
	us := micros(ttl)
	res, err := exec(ctx, s.queue.try, lk.key, lk.owner[:], us, lk.key, lk.key, lk.owner[:], lk.owner[:], us)
	if busy, _, ok := fairBusy(res, err); ok {
		return nil, driver.Busy(busy)
	}
	return lk.granted(ctx, res, err)
}

// fairBusy reads the busy answer of a fair statement: the holder's remaining time
// and the waiters ahead; ok is false when the statement took the lock or failed.
func fairBusy(res sql.Result, err error) (remaining time.Duration, ahead int, ok bool) {
	if err != nil {
		return 0, 0, false
	}
	id, err := res.LastInsertId()
	if err != nil || id&busyFlag == 0 {
		return 0, 0, false
	}
	v := id &^ busyFlag
	return time.Duration(v&(1<<aheadShift-1)) * time.Microsecond, int(v >> aheadShift), true
}

// Lock tries once; when the lock is held or others wait it joins the queue and
// waits there (queueWait).
func (d fairTableDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, me, _, err := d.firstTry(ctx, key, ttl, d.TryLock)
	if me == nil {
		return lk, err
	}
	return d.queueWait(ctx, me, ttl)
}

// queueWait joins me to its key's queue and asks again until it is granted the key
// — the first waiter often (every 1 ms, doubling up to 64 ms, cut to the holder's
// remaining time), the others the less often the further back they are (pacer) —
// renewing its place every third of ttl. Its looks claim the key when the queue's
// statements do (the default mode's: queueStatements.unclaim). When ctx ends it leaves the queue (and gives back a lock granted
// to a request whose reply it did not wait for). Its statements run with a context
// that ends settleGrace after ctx (graced): a statement cut off by ctx may still run
// on the server after the leave, and leave behind a row or a claim that would keep
// others from a free key (Conformance/Cancellation caught a claim set so).
func (d *tableDriver) queueWait(ctx context.Context, me *tableLock, ttl time.Duration) (driver.Lock, error) {
	s := me.s.queue
	us := micros(ttl)
	sctx, done := graced(ctx)
	defer done()
	res, err := exec(sctx, s.enqueue, me.key, me.owner[:], us)
	var seq int64
	if err == nil {
		seq, err = res.LastInsertId()
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		d.leave(me)
		return nil, driver.WaitErr(ctx, fmt.Errorf("join the queue: %w", err))
	}
	renewEvery := max(ttl/3, time.Millisecond)
	renewAt := time.Now().Add(renewEvery)
	headPause := time.Millisecond
	pace := pacer{per: 2 * time.Millisecond}
	args := []any{me.key, me.owner[:], us, me.key, me.owner[:], me.key, int64(0),
		me.key, me.owner[:], me.owner[:], me.owner[:], us}
	if s.unclaim != nil {
		args = append(args, me.owner[:], me.key, me.owner[:])
	}
	ahead := 0 // waiters ahead at the last look or peek
	for {
		var remaining time.Duration
		busy := false
		if ahead > 1 && s.peek != nil {
			// Further back than second at the last look: read how far back it is
			// without locking the key's row; look (and claim) once at most one is
			// ahead (the second looks, so that becoming first costs no extra read).
			var err error
			if ahead, remaining, err = peek(sctx, s.peek, me.key, seq); err != nil {
				ahead = 0 // the look below answers for it
			}
			busy = ahead > 0
		}
		if !busy {
			args[6] = seq
			me.validFrom = time.Now()
			res, err := exec(sctx, s.look, args...)
			remaining, ahead, busy = fairBusy(res, err)
			if isDeadlock(err) {
				// InnoDB rolled the look back for a concurrent statement on the queue:
				// nothing was taken; ask again shortly.
				busy, ahead, remaining = true, 0, 0
			}
			if !busy {
				// Leave the queue whenever the look answered, also if ctx ended
				// meanwhile (settled then gives a granted lock back): a row left
				// behind would stand first in the queue until its deadline.
				if err == nil {
					d.dequeue(me)
				}
				lk, err := me.settled(ctx, sctx, res, err)
				if err != nil {
					d.leave(me)
					return nil, driver.WaitErr(ctx, err)
				}
				return lk, nil
			}
		}
		if ctx.Err() != nil {
			d.leave(me)
			return nil, ctx.Err()
		}
		if time.Now().After(renewAt) {
			renewAt = time.Now().Add(renewEvery)
			ok, err := affected(exec(sctx, s.renew, us, me.owner[:]))
			if err == nil && !ok { // dropped (it did not renew in time): queue again
				var res sql.Result
				res, err = exec(sctx, s.enqueue, me.key, me.owner[:], us)
				if err == nil {
					seq, err = res.LastInsertId()
				}
			}
			if err != nil {
				d.leave(me)
				return nil, driver.WaitErr(ctx, fmt.Errorf("renew the place in the queue: %w", err))
			}
		}
		var pause time.Duration
		if ahead == 0 {
			pause = headPause
			if remaining > 0 {
				pause = min(pause, remaining+time.Millisecond)
			}
			headPause = min(2*headPause, 64*time.Millisecond)
		} else {
			headPause = time.Millisecond
			pause = pace.next(ahead, time.Now())
		}
		t := time.NewTimer(min(pause, time.Until(renewAt)))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			d.leave(me)
			return nil, ctx.Err()
		}
	}
}

// peek runs st (peekSQL) for the waiter at seq in key's queue: the live waiters
// ahead of it and the holder's remaining time.
func peek(ctx context.Context, st *sql.Stmt, key []byte, seq int64) (ahead int, remaining time.Duration, err error) {
	var us int64
	err = st.QueryRowContext(ctx, key, seq, key).Scan(&ahead, &us)
	return ahead, time.Duration(us) * time.Microsecond, err
}

// pacer paces a queued waiter's looks at the queue by how fast it moves: a waiter
// with ahead waiters before it looks again after about half the time they should
// take, so that it looks a few times while it moves up (about log2(ahead) times)
// and is not asleep when its turn comes. A fixed backoff by place instead leaves
// the waiter next in line asleep for the pause it chose further back.
type pacer struct {
	per   time.Duration // the time one hand-off takes, as last seen
	ahead int           // waiters ahead at the last look that saw a change (0: none yet)
	at    time.Time     // when
}

// maxQueuePause bounds a queued waiter's pause: a crashed waiter ahead is dropped at
// its deadline, and the queue moves on without anyone's release to tell.
const maxQueuePause = 256 * time.Millisecond

// next records a look that found ahead waiters before ours at now and returns how
// long to pause before the next.
func (p *pacer) next(ahead int, now time.Time) time.Duration {
	switch {
	case p.ahead == 0:
	case ahead < p.ahead:
		p.per = (p.per + now.Sub(p.at)/time.Duration(p.ahead-ahead)) / 2
	case ahead == p.ahead:
		p.per = max(p.per, now.Sub(p.at)) // no one moved since: hand-offs take longer
		return min(max(p.per*time.Duration(ahead)/2, time.Millisecond), maxQueuePause)
	}
	p.ahead, p.at = ahead, now
	return min(max(p.per*time.Duration(ahead)/2, time.Millisecond), maxQueuePause)
}

// newLock returns an ungranted lock of key with a new random owner value (and the
// prepared statements).
func (d *tableDriver) newLock(ctx context.Context, key string) (*tableLock, error) {
	s, err := d.stmts(ctx)
	if err != nil {
		return nil, err
	}
	lk := &tableLock{d: d, s: s, key: []byte(key), holder: generic.HolderRecord(ctx)}
	if _, err := rand.Read(lk.owner[:]); err != nil {
		return nil, fmt.Errorf("owner id: %w", err)
	}
	return lk, nil
}

// dequeue deletes the waiter's row (and the key's expired rows), best effort: a row
// left behind stops counting at its deadline.
func (d *tableDriver) dequeue(l *tableLock) {
	ctx, cancel := context.WithTimeout(context.Background(), tidyTimeout)
	defer cancel()
	_, _ = exec(ctx, l.s.queue.dequeue, l.owner[:], l.key)
}

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == erLockDeadlock
}

// leave takes the waiter out of the queue, ends the key's claim (the default mode)
// if no one else is queued, and frees the lock if a request whose reply it did not wait
// for took it; best effort (a claim left behind ends claimTTL after the last look).
func (d *tableDriver) leave(l *tableLock) {
	d.dequeue(l)
	ctx, cancel := context.WithTimeout(context.Background(), tidyTimeout)
	defer cancel()
	if l.s.queue.unclaim != nil {
		_, _ = exec(ctx, l.s.queue.unclaim, l.key, l.key)
	}
	_, _ = exec(ctx, l.s.tidy, l.key, l.owner[:])
}

func isBusy(err error) bool {
	var b *driver.BusyError
	return errors.As(err, &b)
}
