package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// quoteIdent quotes a MySQL identifier.
func quoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// The table: a key's row is kept when its lock is released (its expiry becomes
// freeAt) so that its token keeps counting up. Keys are bytes, compared exactly. Every
// other column has a fixed size, so that InnoDB updates rows in place. The claim
// columns (claimColumns) say whether queued waiters claim the key.
const createTable = `CREATE TABLE IF NOT EXISTS %s (
  lock_key   VARBINARY(255) NOT NULL,
  owner      BINARY(16) NOT NULL,
  token      BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  ` + claimColumns + `,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB`

// claimColumns: while claim_until has not passed (by the server's clock), Acquires
// queued in the default mode claim the key, and the fast path does not take it
// when it frees (claim.go). claimer and claim_since are no longer written (an
// earlier claim design kept the claimer there); they stay so that a table keeps
// one layout. A table created before these columns existed works without claims
// until Migrate adds them.
const claimColumns = claimerColumn + ",\n  " + claimSinceColumn + ",\n  " + claimUntilColumn

const (
	claimerColumn    = `claimer     BINARY(16) NOT NULL DEFAULT ''`
	claimSinceColumn = `claim_since DATETIME(6) NOT NULL DEFAULT ` + freeAt
	claimUntilColumn = `claim_until DATETIME(6) NOT NULL DEFAULT ` + freeAt
)

// freeAt is the expiry of a released lock: the smallest DATETIME, in the past
// whatever the server's clock says.
const freeAt = "'1000-01-01 00:00:00'"

// busyFlag marks the LAST_INSERT_ID of an attempt that found the lock held: the
// low bits are then the holder's remaining time in microseconds. Tokens stay below it
// (2^62 grants of one key).
const busyFlag = 1 << 62

// acquireSQL takes a lock in one statement. A missing row is inserted with token 1.
// An existing row is taken over only if it is free (released, or expired by the
// server's clock) and no waiter's claim on it lasts (%[3]s: unclaimed, or TRUE on a
// table without claim columns); its token then goes up by one. The assignments run
// left to right: token and owner test the old expiry, expires_at tests the new
// owner. The result comes back in LAST_INSERT_ID (the insert id of the OK packet):
// the new token, or busyFlag plus the holder's remaining microseconds (0 when the
// key is free but claimed). Affected-row counts are not used: they depend on the
// client's CLIENT_FOUND_ROWS flag.
//
// Arguments: key, owner, ttl µs, owner, owner, ttl µs.
const acquireSQL = `INSERT INTO %[1]s (lock_key, owner, token, expires_at)
VALUES (?, ?, LAST_INSERT_ID(1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
  token = IF(expires_at <= UTC_TIMESTAMP(6) AND %[3]s,
             LAST_INSERT_ID(token + 1),
             token + LEAST(0, LAST_INSERT_ID(%[2]d + GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0)))),
  owner = IF(expires_at <= UTC_TIMESTAMP(6) AND %[3]s, ?, owner),
  expires_at = IF(owner = ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, expires_at)`

// unclaimed is acquireSQL's and takeSQL's claim condition on a table with claim
// columns: no claim lasts.
const unclaimed = `claim_until <= UTC_TIMESTAMP(6)`

// takeSQL takes over the key's existing row if it is free and unclaimed (%[2]s, as
// in acquireSQL), in one statement: the fast path for a key this client has seen
// free before (it is cheaper for the server than acquireSQL's insert attempt). One
// affected row means taken; LAST_INSERT_ID is then the new token. Arguments: owner,
// ttl µs, key.
const takeSQL = `UPDATE %[1]s SET token = LAST_INSERT_ID(token + 1), owner = ?,
  expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND expires_at <= UTC_TIMESTAMP(6) AND %[2]s`

// releaseSQL frees the lock if it is still ours and not expired. Arguments: key, owner.
const releaseSQL = `UPDATE %s SET expires_at = ` + freeAt + `
WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// tidySQL frees the lock if it is still ours, expired or not: the clean-up after a
// failed release or an interrupted acquire. Arguments: key, owner.
const tidySQL = `UPDATE %s SET expires_at = ` + freeAt + ` WHERE lock_key = ? AND owner = ?`

// refreshSQL extends the lock if it is still ours and not expired.
// Arguments: ttl µs, key, owner.
const refreshSQL = `UPDATE %s SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`

// tableDriver is the unique-index lock.
type tableDriver struct {
	db  *sql.DB
	cfg config

	mu        sync.Mutex // guards the fields below
	prepared  *statements
	prims     *primStatements     // semaphores and read-write locks (primitives.go)
	elections *electionStatements // election.go
	closed    bool
	// background runs the clean-ups and holder records; Close waits for them.
	background generic.Background
	// free holds keys whose row this client last saw free or took: their next
	// attempt tries takeSQL first. A hint only: a wrong one costs a round trip.
	free map[string]struct{}
}

// maxHints bounds tableDriver.free; past it the hints start over.
const maxHints = 4096

type statements struct {
	acquire, take, release, tidy, refresh *sql.Stmt
	claims                                bool // the table has the claim columns
	// queue: the queued waiters' statements (WithFIFO's, or the default mode's);
	// nil in the default mode on a table without claim columns or queue table.
	queue *queueStatements
}

// stmts prepares the statements on first use (the table may not exist before);
// a failure is returned and tried again next time.
func (d *tableDriver) stmts(ctx context.Context) (*statements, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, dlock.ErrClosed
	}
	if d.prepared != nil {
		return d.prepared, nil
	}
	if d.cfg.migrate {
		if err := migrate(ctx, d.db, d.cfg); err != nil && !errors.As(err, new(claimsNotAdded)) {
			return nil, err
		}
	}
	t := quoteIdent(d.cfg.table)
	var s statements
	var err error
	prep := func(dst **sql.Stmt, query string) {
		if err == nil {
			*dst, err = d.db.PrepareContext(ctx, query)
		}
	}
	prep(&s.acquire, fmt.Sprintf(acquireSQL, t, busyFlag, unclaimed))
	if isBadField(err) {
		// A table made before the claim columns: no claims until Migrate adds them
		// (and this Locker prepares its statements again, in a new process).
		err = nil
		prep(&s.acquire, fmt.Sprintf(acquireSQL, t, busyFlag, "TRUE"))
		prep(&s.take, fmt.Sprintf(takeSQL, t, "TRUE"))
	} else {
		prep(&s.take, fmt.Sprintf(takeSQL, t, unclaimed))
		s.claims = true
		if err == nil && !d.cfg.fifo {
			s.queue, err = prepareQueue(ctx, d.db, t, quoteIdent(d.cfg.table+QueueSuffix), false)
			if missing(err) {
				// A table Migrate made before the default mode queued, or a lock user
				// without privileges on the queue table: poll only.
				err = nil
			}
		}
	}
	prep(&s.release, fmt.Sprintf(releaseSQL, t))
	prep(&s.tidy, fmt.Sprintf(tidySQL, t))
	prep(&s.refresh, fmt.Sprintf(refreshSQL, t))
	if err == nil && d.cfg.fifo {
		s.queue, err = prepareQueue(ctx, d.db, t, quoteIdent(d.cfg.table+QueueSuffix), true)
	}
	if err != nil {
		s.close()
		return nil, fmt.Errorf("prepare statements on table %s: %w", t, err)
	}
	d.prepared = &s
	return &s, nil
}

func (s *statements) close() {
	for _, st := range []*sql.Stmt{s.acquire, s.take, s.release, s.tidy, s.refresh} {
		if st != nil {
			st.Close()
		}
	}
	if s.queue != nil {
		s.queue.close()
	}
}

// exec runs st, and again while InnoDB rolls it back as a deadlock victim (up to
// deadlockTries times, or until ctx ends): concurrent INSERT ... ON DUPLICATE KEY
// UPDATE statements on one row (and the fair mode's queue statements) can deadlock,
// and a statement rolled back changed nothing. A deadlock is not an answer: a free
// lock must not look held. The pause before each retry is random, up to a bound that
// doubles from 100µs to 10ms: victims that retried in step deadlocked again (with 20
// retries 100µs·i apart, 9 of 64 goroutines queueing on one key in fair mode gave up
// at CI's load).
func exec(ctx context.Context, st *sql.Stmt, args ...any) (sql.Result, error) {
	for i := 1; ; i++ {
		res, err := st.ExecContext(ctx, args...)
		if !isDeadlock(err) || i == deadlockTries || ctx.Err() != nil {
			return res, err
		}
		bound := min(100*time.Microsecond<<min(i, 7), 10*time.Millisecond)
		time.Sleep(time.Duration(mrand.Int64N(int64(bound))) + 50*time.Microsecond)
	}
}

// deadlockTries bounds exec's attempts of one statement (about 1s of pauses).
const deadlockTries = 100

// stmtDef is a statement to prepare: its query, a format of the quoted table name,
// and where the prepared statement goes.
type stmtDef struct {
	dst   **sql.Stmt
	query string
}

// prepareOn prepares each of defs on table. On an error it closes those it prepared
// and returns the error, naming the table.
func (d *tableDriver) prepareOn(ctx context.Context, table string, defs []stmtDef) error {
	t := quoteIdent(table)
	for i, def := range defs {
		st, err := d.db.PrepareContext(ctx, fmt.Sprintf(def.query, t))
		if err != nil {
			for _, done := range defs[:i] {
				(*done.dst).Close()
				*done.dst = nil
			}
			return fmt.Errorf("prepare statements on table %s: %w", t, err)
		}
		*def.dst = st
	}
	return nil
}

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// erLockDeadlock is MySQL's ER_LOCK_DEADLOCK: InnoDB rolled the statement back
// because another one on the same row went first.
const erLockDeadlock = 1213

func (d *tableDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, err := d.newLock(ctx, key)
	if err != nil {
		return nil, err
	}
	s := lk.s
	us := micros(ttl)
	// A statement that can take the lock gets settleGrace past the end of ctx to
	// answer: cut off by the client at once, it could still run on the server after
	// a later release and take the lock for a caller that gave up, and a clean-up
	// sent meanwhile on another connection could run before it. An answer within
	// the grace (one round trip on a live server) lets a lock it took be freed before
	// TryLock returns (settled); on a stalled network it is cut off after the grace
	// and cleaned up in the background, as before.
	sctx, done := graced(ctx)
	defer done()
	if d.hinted(key) {
		res, err := exec(sctx, s.take, lk.owner[:], us, lk.key)
		if ok, err := affected(res, err); err != nil || ok {
			return lk.settled(ctx, sctx, res, err)
		}
		// Held, or the row is gone: acquireSQL tells which.
	}
	res, err := exec(sctx, s.acquire, lk.key, lk.owner[:], us, lk.owner[:], lk.owner[:], us)
	if err == nil {
		var id int64
		if id, err = res.LastInsertId(); err == nil && id&busyFlag != 0 {
			d.hint(key, false)
			return nil, driver.Busy(time.Duration(id&^busyFlag) * time.Microsecond)
		}
	}
	return lk.settled(ctx, sctx, res, err)
}

// graced returns the context for a statement that can take the lock on behalf of
// a caller with ctx: it ends settleGrace after ctx does (see TryLock). done
// releases its resources.
func graced(ctx context.Context) (sctx context.Context, done func()) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(settleGrace, cancel) })
	return sctx, func() { stop(); cancel() }
}

// settled is granted for a statement run with sctx on behalf of a caller whose
// ctx may have ended meanwhile: then a lock the statement took is released (with
// sctx) and the caller gets ctx's error.
func (l *tableLock) settled(ctx, sctx context.Context, res sql.Result, err error) (driver.Lock, error) {
	lk, err := l.granted(sctx, res, err)
	if err != nil || ctx.Err() == nil {
		return lk, err
	}
	if uerr := lk.Unlock(sctx); uerr != nil && !errors.Is(uerr, dlock.ErrNotHeld) {
		l.tidyUp()
	}
	return nil, fmt.Errorf("acquire: %w", context.Cause(ctx))
}

// granted finishes a statement that took the lock unless it failed: the token is
// its LAST_INSERT_ID.
func (l *tableLock) granted(ctx context.Context, res sql.Result, err error) (driver.Lock, error) {
	var id int64
	if err == nil {
		id, err = res.LastInsertId()
	}
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == erLockDeadlock {
			return nil, driver.Busy(0)
		}
		if ctx.Err() != nil {
			// The statement may have run on the server after the client gave up:
			// free what it may have taken.
			l.tidyUp()
		}
		return nil, fmt.Errorf("acquire: %w", err)
	}
	if id <= 0 || id&busyFlag != 0 {
		l.tidyUp()
		return nil, fmt.Errorf("acquire: the server returned token %d (is the statement's LAST_INSERT_ID reported?)", id)
	}
	l.token = uint64(id)
	l.d.hint(string(l.key), true)
	l.record()
	return l, nil
}

func (d *tableDriver) hinted(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.free[key]
	return ok
}

// hint records whether key's row was last seen free (or taken by this client).
func (d *tableDriver) hint(key string, free bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !free:
		delete(d.free, key)
	case d.free == nil || len(d.free) >= maxHints:
		d.free = map[string]struct{}{key: {}}
	default:
		d.free[key] = struct{}{}
	}
}

func (d *tableDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.background.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prepared != nil {
		d.prepared.close()
		d.prepared = nil
	}
	if d.elections != nil {
		d.elections.close()
		d.elections = nil
	}
	if d.prims != nil {
		d.prims.close()
		d.prims = nil
	}
	if d.cfg.ownDB {
		return d.db.Close()
	}
	return nil
}

// tableLock is one grant; the random owner value identifies it.
type tableLock struct {
	d     *tableDriver
	s     *statements
	key   []byte
	owner [16]byte
	token uint64
	// validFrom is when the statement that granted the lock was sent (fair mode: a
	// waiter's grant comes long after its Acquire began).
	validFrom time.Time
	holder    []byte // the JSON of the holder record its acquire carried, nil if none
}

// ValidFrom is when the statement that granted the lock was sent (driver.ValidFrom).
func (l *tableLock) ValidFrom() time.Time { return l.validFrom }

func (l *tableLock) Token() uint64 { return l.token }

// affected runs an owner-checked statement and reports whether it changed the row.
func affected(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// owned turns the result of an owner-checked statement into the answer of a
// Refresh or Unlock: a failure wrapped in what; no row changed, ErrNotHeld (not
// ours, or ours but expired) after tidy, when given, removed the row all the same.
func owned(ctx context.Context, what string, tidy func(context.Context), res sql.Result, err error) error {
	ok, err := affected(res, err)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case !ok:
		if tidy != nil {
			tidy(ctx)
		}
		return dlock.ErrNotHeld
	}
	return nil
}

func (l *tableLock) Refresh(ctx context.Context, ttl time.Duration) error {
	res, err := exec(ctx, l.s.refresh, micros(ttl), l.key, l.owner[:])
	return owned(ctx, "refresh", nil, res, err)
}

func (l *tableLock) Unlock(ctx context.Context) error {
	res, err := exec(ctx, l.s.release, l.key, l.owner[:])
	return owned(ctx, "release", l.tidy, res, err)
}

// tidy frees the lock if it is still ours (expired or not).
func (l *tableLock) tidy(ctx context.Context) { _, _ = exec(ctx, l.s.tidy, l.key, l.owner[:]) }

// tidyUp frees the lock if it is ours, in the background (the caller returns at
// once, even on a stalled network), with a fresh short context, best effort. A lock
// it misses (the interrupted statement reached the server after it) ends at its TTL.
func (l *tableLock) tidyUp() {
	l.d.inBackground(l.tidy)
}

// inBackground runs a clean-up f in the background with a fresh context bounded by
// tidyTimeout, unless the driver is closed; Close waits for it.
func (d *tableDriver) inBackground(f func(ctx context.Context)) { d.background.Go(f) }

// settleGrace is how long a statement that can take the lock may still answer
// after its caller's ctx ended (see TryLock).
const settleGrace = 100 * time.Millisecond

// tidyTimeout bounds the clean-up after an interrupted request.
const tidyTimeout = 2 * time.Second
