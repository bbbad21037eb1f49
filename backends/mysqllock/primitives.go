package mysqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks live in a second table, HoldersTable(table): per
// key one settings row (owner all zero bytes: the kind, a semaphore's limit, the last
// token) and one row per holder (its owner, mode and expiry on the database
// server's clock). An acquire is one transaction: it locks the key's rows (SELECT …
// FOR UPDATE), decides, and writes the settings and its holder row in one
// statement — four round trips with BEGIN and COMMIT, against one for the mutex.
// Refresh and release are one owner-checked statement each. The settings row is
// kept, so tokens keep counting up per key. There is no queue: waiters poll (cut to
// the first holder's remaining time), in no order, except that a read-write lock
// prefers writers: an exclusive acquirer that waits (LockRW) keeps a place row
// (mode writerPlace) with an expiry of its TTL, renewed at each look, and no shared
// lease is granted while a live place exists; its grant overwrites the place (the
// same primary key), and the end of its wait deletes it.

// HoldersTable is the name of the table of the semaphores and read-write locks that
// go with the lock table named table.
func HoldersTable(table string) string { return table + "_holders" }

const createHolders = `CREATE TABLE IF NOT EXISTS %s (
  lock_key   VARBINARY(255) NOT NULL,
  owner      BINARY(16) NOT NULL,
  kind       VARCHAR(16) NOT NULL,
  lim        INT NOT NULL,
  token      BIGINT UNSIGNED NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (lock_key, owner)
) ENGINE=InnoDB`

func migrateHolders(ctx context.Context, db *sql.DB, table string) error {
	name := HoldersTable(table) // fits: validateTable keeps room for the suffix
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createHolders, quoteIdent(name))); err != nil {
		return fmt.Errorf("create table %s: %w", quoteIdent(name), err)
	}
	return nil
}

// settingsOwner marks a key's settings row.
var settingsOwner = make([]byte, 16)

const (
	// primRowsSQL reads (and locks) a key's rows. Argument: key.
	primRowsSQL = `SELECT owner, kind, lim, token, expires_at > UTC_TIMESTAMP(6),
  GREATEST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), 0)
FROM %s WHERE lock_key = ? FOR UPDATE`
	// primGrantSQL writes the settings and the new holder. Arguments: key, settings
	// owner, kind, limit, token; key, owner, mode, token, ttl µs.
	primGrantSQL = `INSERT INTO %s (lock_key, owner, kind, lim, token, expires_at) VALUES
  (?, ?, ?, ?, ?, ` + freeAt + `),
  (?, ?, ?, 0, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE kind = VALUES(kind), lim = VALUES(lim), token = VALUES(token), expires_at = VALUES(expires_at)`
	// primSweepSQL deletes a key's expired holders. Arguments: key, settings owner.
	primSweepSQL = `DELETE FROM %s WHERE lock_key = ? AND owner <> ? AND expires_at <= UTC_TIMESTAMP(6)`
	// primRefreshSQL extends a live holder. Arguments: ttl µs, key, owner.
	primRefreshSQL = `UPDATE %s SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`
	// primReleaseSQL deletes a live holder. Arguments: key, owner.
	primReleaseSQL = `DELETE FROM %s WHERE lock_key = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`
	// primTidySQL deletes a holder, live or not. Arguments: key, owner.
	primTidySQL = `DELETE FROM %s WHERE lock_key = ? AND owner = ?`
	// primPlaceSQL takes or renews a waiting writer's place. Arguments: key, owner,
	// ttl µs.
	primPlaceSQL = `INSERT INTO %s (lock_key, owner, kind, lim, token, expires_at) VALUES
  (?, ?, '` + writerPlace + `', 0, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)`
)

const (
	kindSemaphore = "semaphore"
	kindRW        = "rwlock"
	modePermit    = "permit"
	modeShared    = "shared"
	modeExclusive = "exclusive"
	// writerPlace is the mode of a waiting writer's place row: not a holder.
	writerPlace = "wwait"
)

type primStatements struct{ rows, grant, sweep, refresh, release, tidy, place *sql.Stmt }

func (s *primStatements) close() {
	for _, st := range []*sql.Stmt{s.rows, s.grant, s.sweep, s.refresh, s.release, s.tidy, s.place} {
		if st != nil {
			st.Close()
		}
	}
}

// primStmts prepares the primitives' statements on first use.
func (d *tableDriver) primStmts(ctx context.Context) (*primStatements, error) {
	return prepareOnce(ctx, d, &d.prims, HoldersTable(d.cfg.table), func(s *primStatements) []stmtDef {
		return []stmtDef{{&s.rows, primRowsSQL}, {&s.grant, primGrantSQL},
			{&s.sweep, primSweepSQL}, {&s.refresh, primRefreshSQL}, {&s.release, primReleaseSQL}, {&s.tidy, primTidySQL},
			{&s.place, primPlaceSQL}}
	})
}

// prepareOnce returns *slot, first preparing a T's statements (defs) on table once
// the lock table's are (the lock table, and WithMigrate every table, exists then);
// a failure is returned and tried again next time.
func prepareOnce[T any](ctx context.Context, d *tableDriver, slot **T, table string, defs func(*T) []stmtDef) (*T, error) {
	if _, err := d.stmts(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, dlock.ErrClosed
	}
	if *slot != nil {
		return *slot, nil
	}
	s := new(T)
	if err := d.prepareOn(ctx, table, defs(s)); err != nil {
		return nil, err
	}
	*slot = s
	return s, nil
}

func (d *tableDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.primAcquire(ctx, key, kindSemaphore, limit, modePermit, ttl, newOwner(), false)
}

func (d *tableDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.primAcquire(ctx, key, kindRW, 0, rwMode(shared), ttl, newOwner(), false)
}

func rwMode(shared bool) string {
	if shared {
		return modeShared
	}
	return modeExclusive
}

var _ driver.RWWaiter = (*tableDriver)(nil)

// LockRW waits for key's read-write lock (driver.RWWaiter), polling as dlock's
// default retry strategy does (cut to the first holder's remaining time, and at
// least every third of ttl). An exclusive waiter keeps a writer's place (see above)
// from its first refusal: no shared lease is granted while it waits, so it gets in
// once the holders before it are done, however many readers keep coming. When ctx
// ends it deletes its place; a waiter that crashed keeps readers out until its
// place expires (at most ttl after its last look). Writers are not ordered among
// themselves, nor readers.
func (d *tableDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	s, err := d.primStmts(ctx)
	if err != nil {
		return nil, err
	}
	me := &primLock{s: s, key: []byte(key), owner: newOwner()} // tidy gives the place up
	renew := max(ttl/3, time.Millisecond)
	for tries := 1; ; tries++ {
		lk, err := d.primAcquire(ctx, key, kindRW, 0, rwMode(shared), ttl, me.owner, !shared)
		var busy *driver.BusyError
		if !errors.As(err, &busy) {
			if err != nil && !shared {
				me.tidy()
			}
			return lk, driver.WaitErr(ctx, err)
		}
		delay := min(renew, dlock.DefaultRetry.Backoff(tries))
		if busy.Remaining > 0 {
			delay = min(delay, busy.Remaining+time.Millisecond)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			if !shared {
				me.tidy()
			}
			return nil, ctx.Err()
		}
	}
}

// primRow is one row of a key, as primRowsSQL reads it.
type primRow struct {
	owner     []byte
	kind      string
	lim       int
	token     uint64
	live      bool
	remaining int64 // µs
}

// primAcquire makes one attempt at key's primitive for owner, in one transaction.
// With place (an exclusive waiter), a refusal takes or renews owner's writer's
// place.
func (d *tableDriver) primAcquire(ctx context.Context, key, kind string, limit int, mode string, ttl time.Duration, owner []byte, place bool) (driver.Lock, error) {
	s, err := d.primStmts(ctx)
	if err != nil {
		return nil, err
	}
	lk := &primLock{s: s, key: []byte(key), owner: owner, validFrom: time.Now()}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := d.primRows(ctx, tx, s, lk.key)
	if err != nil {
		return nil, busyOnDeadlock(err)
	}
	var settings, writer *primRow // writer: another waiting writer's live place
	var live []primRow
	expired := false
	for i := range rows {
		switch r := &rows[i]; {
		case string(r.owner) == string(settingsOwner):
			settings = r
		case r.live && r.kind == writerPlace:
			if string(r.owner) != string(owner) && (writer == nil || r.remaining < writer.remaining) {
				writer = r
			}
		case r.live:
			live = append(live, *r)
		default:
			expired = true
		}
	}
	if len(live) > 0 && settings != nil {
		switch {
		case settings.kind != kind:
			return nil, fmt.Errorf("%w: %q is in use as a %s", dlock.ErrConflict, key, settings.kind)
		case kind == kindSemaphore && settings.lim != limit:
			return nil, fmt.Errorf("%w: %q is in use as a semaphore with limit %d", dlock.ErrConflict, key, settings.lim)
		}
	}
	if generic.NoRoom(kind == kindSemaphore, limit, mode == modeExclusive, live, func(r primRow) bool { return r.kind == modeExclusive }) {
		first := live[0].remaining
		for _, r := range live {
			first = min(first, r.remaining)
		}
		if place {
			if _, err := tx.StmtContext(ctx, s.place).ExecContext(ctx, lk.key, lk.owner, micros(ttl)); err != nil {
				return nil, busyOnDeadlock(err)
			}
			if err := tx.Commit(); err != nil {
				return nil, busyOnDeadlock(err)
			}
		}
		return nil, driver.Busy(time.Duration(first) * time.Microsecond)
	}
	if mode == modeShared && writer != nil { // a writer waits: readers wait behind it
		return nil, driver.Busy(time.Duration(writer.remaining) * time.Microsecond)
	}
	if expired {
		if _, err := tx.StmtContext(ctx, s.sweep).ExecContext(ctx, lk.key, settingsOwner); err != nil {
			return nil, busyOnDeadlock(err)
		}
	}
	lk.token = 1
	if settings != nil {
		lk.token = settings.token + 1
	}
	if _, err := tx.StmtContext(ctx, s.grant).ExecContext(ctx, lk.key, settingsOwner, kind, limit, lk.token,
		lk.key, lk.owner, mode, lk.token, micros(ttl)); err != nil {
		return nil, busyOnDeadlock(err)
	}
	if err := tx.Commit(); err != nil {
		if ctx.Err() != nil { // the commit may have reached the server: undo what it may have granted
			lk.tidy()
		}
		return nil, busyOnDeadlock(err)
	}
	return lk, nil
}

func (d *tableDriver) primRows(ctx context.Context, tx *sql.Tx, s *primStatements, key []byte) ([]primRow, error) {
	rs, err := tx.StmtContext(ctx, s.rows).QueryContext(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []primRow
	for rs.Next() {
		var r primRow
		if err := rs.Scan(&r.owner, &r.kind, &r.lim, &r.token, &r.live, &r.remaining); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// busyOnDeadlock turns InnoDB's deadlock and lock-wait errors (two acquirers of one
// fresh key) into Busy, and wraps the rest.
func busyOnDeadlock(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == erLockDeadlock || me.Number == erLockWaitTimeout || me.Number == erDupEntry) {
		return driver.Busy(0)
	}
	return fmt.Errorf("acquire: %w", err)
}

const (
	erLockWaitTimeout = 1205
	erDupEntry        = 1062
)

func newOwner() []byte {
	var b [16]byte
	for {
		_, _ = rand.Read(b[:])
		if string(b[:]) != string(settingsOwner) {
			return b[:]
		}
	}
}

// primLock is one lease of a semaphore or read-write lock.
type primLock struct {
	s         *primStatements
	key       []byte
	owner     []byte
	token     uint64
	validFrom time.Time // before the attempt that granted it
}

func (l *primLock) Token() uint64 { return l.token }

// ValidFrom is the moment the granting attempt began (driver.ValidFrom): a waiter's
// lease counts its TTL from there, not from the start of its wait.
func (l *primLock) ValidFrom() time.Time { return l.validFrom }

func (l *primLock) Refresh(ctx context.Context, ttl time.Duration) error {
	res, err := exec(ctx, l.s.refresh, micros(ttl), l.key, l.owner) // a deadlock victim changed nothing: again
	return owned(ctx, "refresh", nil, res, err)
}

func (l *primLock) Unlock(ctx context.Context) error {
	res, err := exec(ctx, l.s.release, l.key, l.owner) // a deadlock victim changed nothing: again
	return owned(ctx, "release", func(ctx context.Context) { _, _ = exec(ctx, l.s.tidy, l.key, l.owner) }, res, err)
}

// tidy deletes the holder row, best effort, with a fresh short context.
func (l *primLock) tidy() {
	ctx, cancel := context.WithTimeout(context.Background(), tidyTimeout)
	defer cancel()
	_, _ = l.s.tidy.ExecContext(ctx, l.key, l.owner)
}
