package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/backends/internal/sockwatch"
	"github.com/dlock-go/dlock/driver"
)

// The advisory mode (NewAdvisory): session advisory locks, each lease on a
// connection of its own.

// The advisory functions, exclusive and shared; each takes the id ($1).
const (
	tryLockSQL        = "SELECT pg_try_advisory_lock($1)"
	tryLockSharedSQL  = "SELECT pg_try_advisory_lock_shared($1)"
	lockSQL           = "SELECT pg_advisory_lock($1)::text"
	lockSharedSQL     = "SELECT pg_advisory_lock_shared($1)::text"
	unlockSQL         = "SELECT pg_advisory_unlock($1)"
	unlockSharedSQL   = "SELECT pg_advisory_unlock_shared($1)"
	sessionTimeoutSQL = "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_session_timeout'"
)

// advisoryDriver is NewAdvisory's driver.
type advisoryDriver struct {
	pool        *pgxpool.Pool
	opts        options
	registerSQL string
	conns       chan struct{} // a slot per connection held by a lease or a waiting acquire

	mu       sync.Mutex // guards the fields below
	closed   bool
	migrated bool
	probe    *poolerInfo   // nil until the first lock
	check    time.Duration // the check interval, cut to a third of idle_session_timeout
	answer   time.Duration // how long a check waits for the server's answer (driver.SessionAnswerWait)
	ids      map[string]int64
}

var (
	_ driver.Waiter     = (*advisoryDriver)(nil)
	_ driver.RWWaiter   = (*advisoryDriver)(nil)
	_ driver.Semaphorer = (*advisoryDriver)(nil)
)

func newAdvisory(pool *pgxpool.Pool, o options) dlock.Locker {
	d := &advisoryDriver{pool: pool, opts: o, probe: o.pooler, conns: make(chan struct{}, o.maxConns),
		registerSQL: fmt.Sprintf(registerSQL, quoteIdent(o.registry)), ids: map[string]int64{}}
	return dlock.New(d, advisoryInfo)
}

// ready makes the registry (WithMigrate), refuses a pooler that moves sessions,
// and reads the session's idle_session_timeout, once; a failure is returned and
// tried again next time (a refusal every time). It returns the check interval and
// how long a check waits for its answer.
func (d *advisoryDriver) ready(ctx context.Context) (every, answer time.Duration, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, 0, dlock.ErrClosed
	}
	if d.probe == nil {
		p, err := findPooler(ctx, d.pool.Config().ConnConfig)
		if err != nil {
			return 0, 0, err
		}
		d.probe = &p
	}
	if err := refusePooler(*d.probe); err != nil {
		return 0, 0, err
	}
	if d.opts.migrate && !d.migrated {
		if _, err := d.pool.Exec(ctx, fmt.Sprintf(createRegistry, quoteIdent(d.opts.registry))); err != nil && !isDuplicateObject(err) {
			return 0, 0, fmt.Errorf("create table: %w", err)
		}
		d.migrated = true
	}
	if d.check == 0 {
		var ms int64
		err := d.pool.QueryRow(ctx, sessionTimeoutSQL).Scan(&ms)
		if isConnLoss(ctx, err) { // a connection that died in the pool: once more
			err = d.pool.QueryRow(ctx, sessionTimeoutSQL).Scan(&ms)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read idle_session_timeout: %w", err)
		}
		d.check = d.opts.check
		w := time.Duration(ms) * time.Millisecond
		if w > 0 && d.check > w/3 {
			d.check = w / 3
		}
		d.answer = driver.SessionAnswerWait(d.check, w)
	}
	return d.check, d.answer, nil
}

func (d *advisoryDriver) TryLock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.take(ctx, key, false, false)
}

// Lock waits in pg_advisory_lock until the server grants the lock or ctx ends.
func (d *advisoryDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return d.take(ctx, key, false, true)
}

// TryLockRW takes key's read-write lock, shared or exclusive, with the shared and
// exclusive forms of one advisory lock (the id of driver.RWWake(key)).
func (d *advisoryDriver) TryLockRW(ctx context.Context, key string, shared bool, _ time.Duration) (driver.Lock, error) {
	return d.take(ctx, driver.RWWake(key), shared, false)
}

// LockRW waits in the server's queue: a waiting exclusive request keeps later
// shared ones out.
func (d *advisoryDriver) LockRW(ctx context.Context, key string, shared bool, _ time.Duration) (driver.Lock, error) {
	return d.take(ctx, driver.RWWake(key), shared, true)
}

// TryLockSemaphore takes a permit of the generic semaphore (package
// internal/generic): one of limit advisory locks per key. Limits are not compared,
// tokens are 0, and waiters poll.
func (d *advisoryDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return generic.Semaphore{D: d}.TryLockSemaphore(ctx, key, limit, ttl)
}

// take takes the advisory lock of name (a key, or a primitive's name) on a
// connection of its own: without wait one attempt (pg_try_advisory_lock), with
// wait the server's queue (pg_advisory_lock, which grants a free lock at once).
func (d *advisoryDriver) take(ctx context.Context, name string, shared, wait bool) (lk driver.Lock, err error) {
	check, answer, err := d.ready(ctx)
	if err != nil {
		return nil, err
	}
	select {
	case d.conns <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: postgres+advisory: all %d connections of this Locker hold or wait for a lock (max_conns)", dlock.ErrUnavailable, d.opts.maxConns)
	}
	defer func() {
		if lk == nil {
			<-d.conns // no lease keeps the connection
		}
	}()
	try, lock := tryLockSQL, lockSQL
	if shared {
		try, lock = tryLockSharedSQL, lockSharedSQL
	}
	var conn *pgxpool.Conn
	var id int64
	var got bool
	for attempt := 1; ; attempt++ {
		if conn, err = d.pool.Acquire(ctx); err != nil {
			return nil, driver.WaitErr(ctx, fmt.Errorf("connect: %w", err))
		}
		id, err = d.register(ctx, conn, name)
		if err == nil && wait {
			// One statement, granted at once when the lock is free: a try first
			// would cost every contended hand-off a round trip more than the
			// server's queue needs.
			if err = d.wait(ctx, conn, lock, id, shared); err == nil {
				got = true
				break
			}
			// wait disposed of the connection.
		} else {
			if err == nil {
				if err = conn.QueryRow(ctx, try, id).Scan(&got); err != nil {
					err = fmt.Errorf("pg_try_advisory_lock: %w", err)
				}
			}
			if err == nil {
				break
			}
			discard(conn)
		}
		// Cut off by ctx, the statement may have run: the session's end frees what it
		// took. A connection that died while idle in the pool (a server restart):
		// once more on another (what a dead session held is gone with it).
		if attempt == 2 || !isConnLoss(ctx, err) {
			return nil, driver.WaitErr(ctx, err)
		}
	}
	if !got {
		conn.Release()
		return nil, driver.Busy(0)
	}
	l := &advisoryLock{d: d, conn: conn, id: id, shared: shared, name: name, check: check, answer: answer, turn: make(chan struct{}, 1), lost: make(chan struct{}),
		sock: sockwatch.New(socketOf(conn.Conn().PgConn()))}
	l.watch()
	return l, nil
}

// cancelTimeout bounds each step of ending a wait that ctx ended (cancelling it on
// the server, reading its answer, unlocking).
const cancelTimeout = time.Second

// wait runs lock (pg_advisory_lock) on conn until the server grants id or ctx
// ends. Then the wait is cancelled on the server (a cancel request), its answer
// read, and the lock, if the server granted it meanwhile, unlocked — before wait
// returns — and the connection dropped (a late cancel request must not reach a
// statement of the connection's next user). On an error the connection is gone.
func (d *advisoryDriver) wait(ctx context.Context, conn *pgxpool.Conn, lock string, id int64, shared bool) error {
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	pg := conn.Conn().PgConn()
	pid := pg.PID()
	// The statement runs on the caller's goroutine (an uncontended Acquire pays for
	// nothing else); when ctx ends meanwhile, the cancel request is sent from
	// AfterFunc's, and without an answer cancelTimeout later pgx is told to close
	// the connection.
	var cerr error
	var late *time.Timer
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		cctx, ccancel := context.WithTimeout(context.Background(), cancelTimeout)
		cerr = pg.CancelRequest(cctx)
		ccancel()
		late = time.AfterFunc(cancelTimeout, qcancel)
	})
	var void string
	err := conn.QueryRow(qctx, lock, id).Scan(&void)
	if stop() { // ctx did not end while the statement ran
		if err == nil {
			return nil
		}
		discard(conn)
		return driver.WaitErr(ctx, fmt.Errorf("pg_advisory_lock: %w", err))
	}
	<-cancelled
	late.Stop()
	if err == nil || isQueryCanceled(err) {
		// Granted before the cancel arrived, or cancelled: either way unlock (false if
		// not held). A cancel request that arrives late cancels one statement: ask
		// again.
		for range 3 {
			uctx, ucancel := context.WithTimeout(context.Background(), cancelTimeout)
			var had bool
			uerr := conn.QueryRow(uctx, unlockFor(shared), id).Scan(&had)
			ucancel()
			if uerr == nil {
				discard(conn)
				return ctx.Err()
			}
			if !isQueryCanceled(uerr) {
				break
			}
		}
	}
	// The session may still hold the lock: end it, and wait until the server has.
	discard(conn)
	if gerr := d.waitGone(pid); gerr != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), errors.Join(cerr, gerr))
	}
	return ctx.Err()
}

// waitGone returns once the server session pid has ended (its locks freed), or an
// error after cancelTimeout.
func (d *advisoryDriver) waitGone(pid uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	for {
		var n int
		err := d.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n)
		switch {
		case err != nil:
			return fmt.Errorf("waiting for the session of the cancelled wait to end: %w", err)
		case n == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the session of the cancelled wait did not end within %v", cancelTimeout)
		case <-time.After(time.Millisecond): // the server's session list: nothing signals its end
		}
	}
}

func unlockFor(shared bool) string {
	if shared {
		return unlockSharedSQL
	}
	return unlockSQL
}

// isQueryCanceled reports PostgreSQL's query_canceled (a cancel request's work).
func isQueryCanceled(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014"
}

func (d *advisoryDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.opts.ownPool {
		closePool(d.pool, d.opts.dials)
	}
	return nil
}

// advisoryLock is one held advisory lock and the connection whose session holds it.
type advisoryLock struct {
	d      *advisoryDriver
	conn   *pgxpool.Conn
	id     int64
	shared bool
	name   string
	check  time.Duration // the interval between checks
	answer time.Duration // how long a check waits for the server's answer (driver.SessionAnswerWait)

	// turn is one slot, held by whoever uses the connection: a check, or Unlock —
	// which waits for it no longer than its context allows.
	turn chan struct{}
	// Guarded by turn:
	timer *time.Timer      // the next check
	sock  *sockwatch.Watch // watches the connection between statements; nil: checks alone
	ended atomic.Bool      // released or lost: the connection is gone (set with the turn held; read without it)

	mu    sync.Mutex // guards cause
	cause error

	lost chan struct{} // closed when the session is found gone
}

var _ driver.Sessioned = (*advisoryLock)(nil)

func (l *advisoryLock) Token() uint64 { return 0 }

func (l *advisoryLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (l *advisoryLock) Lost() <-chan struct{} { return l.lost }

func (l *advisoryLock) Cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// watch starts the checks: a ping of the connection every check interval until
// Unlock or a failure (each ping waits driver.SessionAnswerWait for its answer, so a
// silent network's loss is reported at least an interval before idle_session_timeout
// frees the lock),
// and between statements the socket watch, which finds a session the server ended at
// once.
func (l *advisoryLock) watch() {
	l.turn <- struct{}{}
	l.timer = time.AfterFunc(l.check, l.ping)
	l.sock.Start(l.sessionEnding)
	<-l.turn
}

// ping is the periodic check.
func (l *advisoryLock) ping() {
	l.turn <- struct{}{}
	defer func() { <-l.turn }()
	if !l.ended.Load() && l.checkLocked("failed") {
		l.timer.Reset(l.check)
	}
}

// sessionEnding runs when the socket became readable between statements: the
// server closed the connection or sent something unasked. A ping tells which.
func (l *advisoryLock) sessionEnding() {
	l.turn <- struct{}{}
	defer func() { <-l.turn }()
	if !l.ended.Load() {
		l.checkLocked("was closed by the server")
	}
}

// checkLocked pings the connection; on failure the lease is lost. It reports
// whether the session is still there. The caller holds the turn.
func (l *advisoryLock) checkLocked(what string) bool {
	l.sock.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), l.answer)
	err := l.conn.Ping(ctx)
	timedOut := ctx.Err() != nil
	cancel()
	if err != nil {
		// No answer within the interval: the client lost touch (LossSilent); dropping
		// the connection may end the session at once, so no HeldUntil. An answer that
		// is an error: the server ended the session or closed the connection.
		kind := driver.LossSession
		if timedOut {
			kind = driver.LossSilent
		}
		l.endLocked(&driver.LossError{Kind: kind,
			Err: fmt.Errorf("the connection holding advisory lock %d (%q) %s: %w", l.id, l.name, what, err)})
		close(l.lost)
		return false
	}
	l.sock.Start(l.sessionEnding)
	return true
}

// endLocked drops the connection (which ends the session and so frees the lock on
// the server); the caller holds the turn.
func (l *advisoryLock) endLocked(cause error) {
	l.sock.Stop()
	l.ended.Store(true)
	l.mu.Lock()
	l.cause = cause
	l.mu.Unlock()
	l.timer.Stop()
	discard(l.conn)
	<-l.d.conns
}

// Unlock releases the lock. It waits for the connection's turn (a check may be using
// it) no longer than ctx allows: then it returns ctx's error and the lease is as it
// was.
func (l *advisoryLock) Unlock(ctx context.Context) error {
	if l.ended.Load() {
		return dlock.ErrNotHeld
	}
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("the connection holding advisory lock %d is busy with a check: %w", l.id, ctx.Err())
	}
	defer func() { <-l.turn }()
	if l.ended.Load() {
		return dlock.ErrNotHeld
	}
	l.sock.Stop()
	var had bool
	err := l.conn.QueryRow(ctx, unlockFor(l.shared), l.id).Scan(&had)
	switch {
	case err != nil && ctx.Err() != nil:
		// No answer within ctx: dropping the connection ends the session, and the
		// server frees the lock when it hears the close (or at idle_session_timeout).
		// The lock was not found gone: the lease is given up as unreachable (the lock
		// may be free already: no HeldUntil), and Release says it got no answer.
		l.endLocked(&driver.LossError{Kind: driver.LossSilent,
			Err: fmt.Errorf("pg_advisory_unlock of advisory lock %d (%q) did not answer before its context ended: %w", l.id, l.name, err)})
		close(l.lost)
		return fmt.Errorf("pg_advisory_unlock of advisory lock %d: no answer: %w", l.id, err)
	case err != nil:
		// The session may still hold the lock (a slow network) or be gone: either way
		// dropping the connection ends it.
		l.endLocked(err)
		return fmt.Errorf("%w: pg_advisory_unlock on a failed connection: %w", dlock.ErrNotHeld, err)
	case !had:
		l.endLocked(dlock.ErrNotHeld)
		return dlock.ErrNotHeld
	}
	l.ended.Store(true)
	l.timer.Stop()
	l.conn.Release()
	<-l.d.conns
	return nil
}
