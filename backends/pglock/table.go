package pglock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// The lock table: a key's row is kept when its lock is released (its expiry becomes
// -infinity) so that its token keeps counting up. Keys are bytes (a key may hold
// NUL, which text cannot), compared exactly.
const createTable = `CREATE TABLE IF NOT EXISTS %s (
  lock_key   bytea PRIMARY KEY,
  owner      uuid NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL
)`

// ttlExpr is the expiry of a grant or refresh whose TTL, in microseconds, is the
// parameter n: by the database server's clock at the start of the statement.
func ttlExpr(n int) string {
	return fmt.Sprintf("statement_timestamp() + $%d::bigint * interval '1 microsecond'", n)
}

// remainingExpr is a row's remaining time in microseconds (0 once passed; a
// released row's expiry is -infinity).
const remainingExpr = `floor(extract(epoch FROM (GREATEST(expires_at, statement_timestamp()) - statement_timestamp())) * 1000000)::bigint`

// acquireSQL takes a lock in one statement: a missing row is inserted with token 1;
// an existing row is taken over only if it is free (released, or expired by the
// server's clock) or already the caller's (a retry whose first answer was lost),
// its token then one more. It returns one row: the token (> 0)
// when granted, else 0, the holder's remaining microseconds and the number of
// waiters ahead (%[3]s; a queued waiter's claim); or no row when the key's row was
// inserted by a transaction this statement's snapshot does not see (held, for an
// unknown time). %[1]s is the table, %[2]s the extra condition of taking over a
// free row (the queue's), "" for none; a row that is already the caller's is taken
// again whatever the queue says (the caller holds it already).
//
// Arguments: key, owner, ttl µs (and the conditions').
var acquireSQL = `WITH got AS (
  INSERT INTO %[1]s AS l (lock_key, owner, token, expires_at)
  VALUES ($1, $2, 1, ` + ttlExpr(3) + `)
  ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, token = l.token + 1, expires_at = EXCLUDED.expires_at
  WHERE l.owner = EXCLUDED.owner OR (l.expires_at <= statement_timestamp()%[2]s)
  RETURNING token)
SELECT token, 0::bigint, 0::bigint FROM got
UNION ALL
SELECT 0::bigint, ` + remainingExpr + `, %[3]s FROM %[1]s WHERE lock_key = $1 AND NOT EXISTS (SELECT 1 FROM got)`

// refreshSQL extends the lock if it is still ours and not expired.
// Arguments: key, owner, ttl µs.
var refreshSQL = `UPDATE %s SET expires_at = ` + ttlExpr(3) + `
WHERE lock_key = $1 AND owner = $2 AND expires_at > statement_timestamp()`

// releaseSQL frees the lock if it is ours and reports whether it was still live,
// and announces the release on the channel (%[2]s: the payload, see notifyPayload;
// %[3]s: what adds a second announcement, or nothing). No row: not ours.
// Arguments: key, owner, channel, payload.
const releaseSQL = `UPDATE %[1]s AS l SET expires_at = '-infinity'
FROM (SELECT expires_at AS was FROM %[1]s WHERE lock_key = $1 AND owner = $2) o
WHERE l.lock_key = $1 AND l.owner = $2
RETURNING o.was > statement_timestamp(), pg_notify($3, %[2]s)::text%[3]s`

// tidySQL frees the lock if it is still ours, expired or not: the clean-up after an
// interrupted acquire. Arguments: key, owner.
const tidySQL = `UPDATE %s SET expires_at = '-infinity' WHERE lock_key = $1 AND owner = $2`

// keyPayload is the notification payload that announces a release of key's lock
// to the waiters of the mutex, its own expression in SQL being $4.
func keyPayload(name string) string { return "k" + hex.EncodeToString([]byte(name)) }

// tableStatements are the lock table's statements, formatted for one table.
type tableStatements struct {
	acquire, refresh, release, tidy, record string
}

// newTableStatements formats the lock table's statements for table: with the
// queue's conditions (fifo picks the fair mode's, else the default mode's barging
// window), or, queue false, the default mode's without a queue (oldDefault).
func newTableStatements(table string, fifo, queue bool) tableStatements {
	t := quoteIdent(table)
	s := tableStatements{
		acquire: fmt.Sprintf(acquireSQL, t, "", "0::bigint"),
		refresh: fmt.Sprintf(refreshSQL, t),
		release: fmt.Sprintf(releaseSQL, t, "$4", ""),
		tidy:    fmt.Sprintf(tidySQL, t),
		record:  fmt.Sprintf(recordSQL, quoteIdent(OwnersTable(table)), t),
	}
	if queue {
		q := quoteIdent(QueueTable(table))
		free := fmt.Sprintf(bargeFree, q, bargeWindow.Microseconds())
		if fifo {
			free = fmt.Sprintf(fairFree, q)
		}
		s.acquire = fmt.Sprintf(acquireSQL, t, free, "0::bigint")
		s.release = fmt.Sprintf(releaseSQL, t, fmt.Sprintf(fairNext, q), fmt.Sprintf(fairMoved, q))
	}
	return s
}

// tableDriver is the lease table (New).
type tableDriver struct {
	pool  *pgxpool.Pool
	opts  options
	queue tableStatements // with the queue's conditions (WithFIFO, or the default mode)
	old   tableStatements // the default mode's without a queue (oldDefault)
	fair  fairStatements  // the queue's
	prim  primStatements
	elect electionStatements
	multi multiStatements
	hub   *hub // LISTEN/NOTIFY wake-ups (listen.go)

	// oldDefault: the default mode, on a database whose queue table is missing,
	// lacks its since column (made by an older Migrate) or may not be used by the
	// user (granted only the lock table, as older docs said was enough): no queue,
	// every waiter listens for the key's releases, as before the default mode
	// queued. Found by the first lock (ready) and kept for the Locker's life.
	oldDefault atomic.Bool

	// slowQueue: this Locker's last waiter far back in a queue found it moving
	// slowly and listened (fair.go); the next one listens from the start.
	slowQueue atomic.Bool

	mu       sync.Mutex // guards the fields below
	migrated bool
	closed   bool
	probe    *poolerInfo // what is in front of the server; nil until the first lock
	looked   bool        // the default mode has looked for the queue's since column

	// background runs the clean-ups and holder records; Close waits for them.
	background generic.Background
}

var (
	_ driver.Notifier  = (*tableDriver)(nil)
	_ driver.ValidFrom = (*tableLock)(nil)
)

func newTable(pool *pgxpool.Pool, o options) dlock.Locker {
	d := &tableDriver{pool: pool, opts: o, probe: o.pooler, background: generic.Background{Timeout: tidyTimeout},
		queue: newTableStatements(o.table, o.fifo, true), old: newTableStatements(o.table, false, false),
		fair: newFairStatements(o.table, o.fifo),
		prim: newPrimStatements(o.table), elect: newElectionStatements(o.table), multi: newMultiStatements(o.table)}
	d.hub = newHub(pool.Config().ConnConfig, o.table)
	return dlock.New(fairDriver{d}, tableInfo)
}

// s is the lock table's statements the Locker uses (known once ready returned).
func (d *tableDriver) s() *tableStatements {
	if d.oldDefault.Load() {
		return &d.old
	}
	return &d.queue
}

// ready makes the tables (WithMigrate) and finds out what is in front of the
// server, once; a failure is returned and tried again next time. Behind a pooler
// that moves clients between server sessions the notifications are off (LISTEN
// stays with one server session); statements run as the pool's configuration says
// (the URL opener has them unnamed there: a statement prepared on one session is
// unknown to the next).
func (d *tableDriver) ready(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dlock.ErrClosed
	}
	if d.opts.migrate && !d.migrated {
		if err := migrate(ctx, d.pool, d.opts); err != nil {
			return err
		}
		d.migrated = true
	}
	if d.probe == nil {
		p, err := findPooler(ctx, d.pool.Config().ConnConfig)
		if err != nil {
			return err
		}
		d.probe = &p
	}
	if d.probe.present {
		// Behind any pooler: one the probe took for pinning may still move sessions.
		d.hub.disable(fmt.Sprintf("notifications cannot pass %s", d.probe.what()))
	}
	if !d.opts.fifo && !d.looked {
		var usable bool
		if err := d.pool.QueryRow(ctx, queueUsableSQL, quoteIdent(QueueTable(d.opts.table))).Scan(&usable); err != nil {
			return fmt.Errorf("look for the queue table: %w", err)
		}
		d.oldDefault.Store(!usable)
		d.looked = true
	}
	return nil
}

// newOwner returns a random owner value (never the settings rows' all-zero one).
func newOwner() (pgtype.UUID, error) {
	o := pgtype.UUID{Valid: true}
	for o.Bytes == settingsOwner.Bytes {
		if _, err := rand.Read(o.Bytes[:]); err != nil {
			return o, fmt.Errorf("owner id: %w", err)
		}
	}
	return o, nil
}

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

func (d *tableDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, err := d.newLock(ctx, key)
	if err != nil {
		return nil, err
	}
	got, _, err := lk.acquire(ctx, d.s().acquire, lk.key, lk.owner, micros(ttl))
	return got, err
}

// newLock returns an ungranted lock of key with a new owner value.
func (d *tableDriver) newLock(ctx context.Context, key string) (*tableLock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	return &tableLock{d: d, key: []byte(key), owner: owner, holder: generic.HolderRecord(ctx)}, nil
}

// acquire runs an acquiring statement (acquireSQL's answer: a token, or busy with
// the holder's remaining time and the waiters ahead) with args. A statement that can take the lock gets
// settleGrace past the end of ctx to answer: cut off at once, it could still run on
// the server after the caller gave up (and a later release) and take the lock for
// nobody; an answer within the grace lets a lock it took be freed before acquire
// returns, and without one the lock is freed in the background.
func (l *tableLock) acquire(ctx context.Context, query string, args ...any) (lk driver.Lock, ahead int64, err error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(settleGrace, cancel) })()
	var token, remaining int64
	for attempt := 1; ; attempt++ {
		l.validFrom = time.Now()
		err = l.d.pool.QueryRow(sctx, query, args...).Scan(&token, &remaining, &ahead)
		if attempt == 2 || !isConnLoss(sctx, err) {
			break
		}
		// A connection that died while idle in the pool (a server restart, a cut
		// network): once more on another. The statement may have run before its
		// answer was lost; taking over one's own row again is allowed.
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, 0, driver.Busy(0)
	case err != nil:
		if sctx.Err() != nil {
			l.tidyUp() // the statement may have run on the server after the client gave up
		}
		if isSerialization(err) {
			return nil, 0, driver.Busy(0) // rolled back: nothing was taken
		}
		return nil, 0, driver.WaitErr(ctx, fmt.Errorf("acquire: %w", err))
	case token == 0:
		return nil, ahead, driver.Busy(time.Duration(remaining) * time.Microsecond)
	}
	l.token = uint64(token)
	if ctx.Err() != nil {
		// Granted after the caller gave up: give it back.
		if uerr := l.Unlock(sctx); uerr != nil && !errors.Is(uerr, dlock.ErrNotHeld) {
			l.tidyUp()
		}
		return nil, 0, fmt.Errorf("acquire: %w", context.Cause(ctx))
	}
	l.record()
	return l, 0, nil
}

// settleGrace is how long a statement that can take the lock may still answer
// after its caller's ctx ended (see acquire).
const settleGrace = 100 * time.Millisecond

// tidyTimeout bounds the clean-up after an interrupted request.
const tidyTimeout = 2 * time.Second

// isConnLoss reports an error of the connection itself (not the server's answer, not
// ctx's end): the connection was dead, or died during the request.
func isConnLoss(ctx context.Context, err error) bool {
	var pe *pgconn.PgError
	return err != nil && ctx.Err() == nil && !errors.As(err, &pe) && !errors.Is(err, pgx.ErrNoRows)
}

// isSerialization reports an error that means "another transaction got there
// first" (a deadlock or serialization failure): nothing was changed, and the lock
// is as busy as it was.
func isSerialization(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Subscribe wakes the waiter when a release of key is announced (driver.Notifier).
func (d *tableDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := d.ready(ctx); err != nil {
		return nil, nil, err
	}
	return d.hub.subscribe(ctx, keyPayload(key))
}

func (d *tableDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.background.Close()
	d.hub.close()
	if d.opts.ownPool {
		closePool(d.pool, d.opts.dials)
	}
	return nil
}

// inBackground runs f (a clean-up, or a best-effort write such as a holder record)
// in the background with a fresh context bounded by tidyTimeout, unless the driver
// is closed; Close waits for it.
func (d *tableDriver) inBackground(f func(ctx context.Context)) { d.background.Go(f) }

// tableLock is one grant; the random owner value identifies it.
type tableLock struct {
	d         *tableDriver
	key       []byte
	owner     pgtype.UUID
	token     uint64
	validFrom time.Time // when the statement that granted it was sent
	holder    []byte    // the JSON of the holder record its acquire carried, nil if none
}

func (l *tableLock) Token() uint64 { return l.token }

// ValidFrom is when the statement that granted the lock was sent (driver.ValidFrom):
// a fair waiter's grant comes long after its Acquire began.
func (l *tableLock) ValidFrom() time.Time { return l.validFrom }

func (l *tableLock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.d.refreshRow(ctx, "refresh", l.d.s().refresh, l.key, l.owner, micros(ttl))
}

func (l *tableLock) Unlock(ctx context.Context) error {
	return l.d.releaseRow(ctx, "release", l.d.s().release, l.key, l.owner, l.d.hub.channel, keyPayload(string(l.key)))
}

// refreshRow runs a statement that extends the life of an owned row (args name it
// and its owner): ErrNotHeld when it changed no row (not ours, or expired).
func (d *tableDriver) refreshRow(ctx context.Context, what, stmt string, args ...any) error {
	tag, err := d.pool.Exec(ctx, stmt, args...)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case tag.RowsAffected() == 0:
		return dlock.ErrNotHeld
	}
	return nil
}

// releaseRow runs a statement that deletes an owned row and announces it, answering
// whether the row was live and the notification's result: ErrNotHeld when no row
// was ours, or ours but expired (freed all the same).
func (d *tableDriver) releaseRow(ctx context.Context, what, stmt string, args ...any) error {
	var live bool
	var void string
	err := d.pool.QueryRow(ctx, stmt, args...).Scan(&live, &void)
	switch {
	case errors.Is(err, pgx.ErrNoRows), err == nil && !live:
		return dlock.ErrNotHeld
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// tidyUp frees the lock if it is ours, in the background (the caller returns at
// once, even on a stalled network), best effort. A lock it misses (the interrupted
// statement reached the server after it) ends at its TTL.
func (l *tableLock) tidyUp() {
	l.d.inBackground(func(ctx context.Context) { _, _ = l.d.pool.Exec(ctx, l.d.s().tidy, l.key, l.owner) })
}
