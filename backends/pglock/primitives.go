package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks of the lease table (New) live in a second table,
// HoldersTable(table): per key one settings row (owner all zero: the kind, a
// semaphore's limit, the last token) and one row per holder (its owner, mode and
// expiry by the database server's clock). An acquire is one transaction in two
// round trips: the first (BEGIN, the settings row inserted or locked, the key's
// holders read after the lock is held) lets the client decide; the second either
// writes the settings and its holder row and commits, or rolls back. Refresh and
// release are one owner-checked statement each; a release announces itself
// (pg_notify) to the key's waiters. The settings row is kept, so tokens keep
// counting up per key. There is no queue: waiters wake on releases, or when the
// first holder's time is up, with neither order nor writer preference.

// holdersSuffix and electionsSuffix name the primitives' tables after the lock
// table's.
const (
	holdersSuffix   = "_holders"
	electionsSuffix = "_elections"
)

// HoldersTable is the name of the table of the semaphores and read-write locks that
// go with the lock table named table.
func HoldersTable(table string) string { return table + holdersSuffix }

const createHolders = `CREATE TABLE IF NOT EXISTS %s (
  lock_key   bytea NOT NULL,
  owner      uuid NOT NULL,
  kind       text NOT NULL,
  lim        integer NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (lock_key, owner)
)`

// settingsOwner marks a key's settings row: the all-zero uuid.
var settingsOwner = pgtype.UUID{Valid: true}

const (
	// primSettingsSQL inserts the key's settings row, or locks the one there, and
	// returns it. Arguments: key, settings owner, kind, limit.
	primSettingsSQL = `INSERT INTO %s AS h (lock_key, owner, kind, lim, token, expires_at) VALUES ($1, $2, $3, $4, 0, '-infinity')
ON CONFLICT (lock_key, owner) DO UPDATE SET lock_key = EXCLUDED.lock_key
RETURNING h.kind, h.lim, h.token`
	// primRowsSQL reads a key's holders (run after the settings row is locked, so
	// its snapshot sees every committed holder). Arguments: key, settings owner.
	primRowsSQL = `SELECT kind, expires_at > statement_timestamp(), ` + remainingExpr + `
FROM %s WHERE lock_key = $1 AND owner <> $2`
	// primSweepSQL deletes a key's expired holders. Arguments: key, settings owner.
	primSweepSQL = `DELETE FROM %s WHERE lock_key = $1 AND owner <> $2 AND expires_at <= statement_timestamp()`
	// primSetSQL writes the settings. Arguments: key, settings owner, kind, limit,
	// token.
	primSetSQL = `UPDATE %s SET kind = $3, lim = $4, token = $5 WHERE lock_key = $1 AND owner = $2`
	// primHoldSQL adds a holder. Arguments: key, owner, mode, token, ttl µs.
	primHoldSQL = `INSERT INTO %s (lock_key, owner, kind, lim, token, expires_at) VALUES ($1, $2, $3, 0, $4, ` + "statement_timestamp() + $5::bigint * interval '1 microsecond'" + `)`
	// primRefreshSQL extends a live holder. Arguments: key, owner, ttl µs.
	primRefreshSQL = `UPDATE %s SET expires_at = statement_timestamp() + $3::bigint * interval '1 microsecond'
WHERE lock_key = $1 AND owner = $2 AND expires_at > statement_timestamp()`
	// primReleaseSQL deletes a holder, reports whether it was live, and announces
	// the release. Arguments: key, owner, channel, payload.
	primReleaseSQL = `DELETE FROM %s WHERE lock_key = $1 AND owner = $2
RETURNING expires_at > statement_timestamp(), pg_notify($3, $4)::text`
)

const (
	kindSemaphore = "semaphore"
	kindRW        = "rwlock"
	modePermit    = "permit"
	modeShared    = "shared"
	modeExclusive = "exclusive"
)

// primStatements are the primitives' statements for one holders table.
type primStatements struct{ settings, rows, sweep, set, hold, refresh, release string }

func newPrimStatements(table string) primStatements {
	h := quoteIdent(HoldersTable(table))
	f := func(q string) string { return fmt.Sprintf(q, h) }
	return primStatements{f(primSettingsSQL), f(primRowsSQL), f(primSweepSQL), f(primSetSQL), f(primHoldSQL), f(primRefreshSQL), f(primReleaseSQL)}
}

var (
	_ driver.Semaphorer = (*tableDriver)(nil)
	_ driver.RWLocker   = (*tableDriver)(nil)
)

func (d *tableDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.primAcquire(ctx, key, kindSemaphore, limit, modePermit, driver.SemaphoreWake(key), ttl)
}

func (d *tableDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	mode := modeExclusive
	if shared {
		mode = modeShared
	}
	return d.primAcquire(ctx, key, kindRW, 0, mode, driver.RWWake(key), ttl)
}

// primHolder is one holder of a key, as primRowsSQL reads it.
type primHolder struct {
	mode      string
	live      bool
	remaining int64 // µs
}

func (d *tableDriver) primAcquire(ctx context.Context, key, kind string, limit int, mode, wake string, ttl time.Duration) (driver.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	s := d.prim
	lk := &primLock{d: d, key: []byte(key), owner: owner, wake: wake}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(s.settings, lk.key, settingsOwner, kind, limit)
	b.Queue(s.rows, lk.key, settingsOwner)
	var setKind string
	var setLimit int
	var setToken int64
	var holders []primHolder
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&setKind, &setLimit, &setToken); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			var h primHolder
			if err := rows.Scan(&h.mode, &h.live, &h.remaining); err != nil {
				rows.Close()
				return err
			}
			holders = append(holders, h)
		}
		rows.Close()
		return rows.Err()
	}()
	if err != nil {
		discard(conn)
		if isSerialization(err) {
			return nil, driver.Busy(0)
		}
		return nil, fmt.Errorf("acquire: %w", err)
	}
	var live []primHolder
	expired := false
	for _, h := range holders {
		if h.live {
			live = append(live, h)
		} else {
			expired = true
		}
	}
	verdict := func() error {
		if len(live) > 0 {
			switch {
			case setKind != kind:
				return fmt.Errorf("%w: %q is in use as a %s", dlock.ErrConflict, key, setKind)
			case kind == kindSemaphore && setLimit != limit:
				return fmt.Errorf("%w: %q is in use as a semaphore with limit %d", dlock.ErrConflict, key, setLimit)
			}
		}
		if generic.NoRoom(kind == kindSemaphore, limit, mode == modeExclusive, live, func(h primHolder) bool { return h.mode == modeExclusive }) {
			first := live[0].remaining
			for _, h := range live {
				first = min(first, h.remaining)
			}
			return driver.Busy(time.Duration(first) * time.Microsecond)
		}
		return nil
	}()
	if verdict != nil {
		// Not cut off by ctx: the rollback frees the settings row at once and keeps
		// the connection.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tidyTimeout)
		defer cancel()
		if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
			discard(conn)
		}
		return nil, verdict
	}
	lk.token = uint64(setToken) + 1
	b = &pgx.Batch{}
	if expired {
		b.Queue(s.sweep, lk.key, settingsOwner)
	}
	b.Queue(s.set, lk.key, settingsOwner, kind, limit, int64(lk.token))
	b.Queue(s.hold, lk.key, lk.owner, mode, int64(lk.token), micros(ttl))
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		discard(conn)
		if ctx.Err() != nil { // the commit may have reached the server: undo what it may have granted
			lk.tidyUp()
		}
		if isSerialization(err) {
			return nil, driver.Busy(0)
		}
		return nil, fmt.Errorf("acquire: %w", err)
	}
	return lk, nil
}

// primLock is one lease of a semaphore or read-write lock.
type primLock struct {
	d     *tableDriver
	key   []byte
	owner pgtype.UUID
	token uint64
	wake  string // the name its release is announced under
}

func (l *primLock) Token() uint64 { return l.token }

func (l *primLock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.d.refreshRow(ctx, "refresh", l.d.prim.refresh, l.key, l.owner, micros(ttl))
}

func (l *primLock) Unlock(ctx context.Context) error {
	return l.d.releaseRow(ctx, "release", l.d.prim.release, l.key, l.owner, l.d.hub.channel, keyPayload(l.wake))
}

// tidyUp deletes the holder row in the background, best effort.
func (l *primLock) tidyUp() {
	l.d.inBackground(func(ctx context.Context) { _ = l.Unlock(ctx) })
}
