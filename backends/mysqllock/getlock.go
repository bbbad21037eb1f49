package mysqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/backends/internal/sockwatch"
	dldriver "github.com/dlock-go/dlock/driver"
)

// DefaultCheckInterval is how often a GET_LOCK lease checks its connection without
// WithCheckInterval.
const DefaultCheckInterval = time.Second

type getLockConfig struct {
	check    time.Duration
	maxConns int
	ownDB    bool
}

// DefaultMaxConns is how many connections a GET_LOCK Locker uses at most without
// WithMaxConns: each held or waiting lease keeps one. (MariaDB's and MySQL's own
// max_connections default is 151, for every client of the server.)
const DefaultMaxConns = 100

// WithMaxConns sets the most connections the Locker keeps at once (default
// DefaultMaxConns): one per held lease and one per waiting Acquire. An acquire that
// would need one more fails at once with an error wrapping dlock.ErrUnavailable that
// names the limit, rather than exhausting the server's max_connections. n <= 0 keeps
// the default.
func WithMaxConns(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxConns = n
		}
	}
}

// WithCheckInterval sets how often a lease pings its connection to find out that it
// died (default DefaultCheckInterval). It is cut to a third of the session's
// wait_timeout. d <= 0 keeps the default.
func WithCheckInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.check = d
		}
	}
}

// NewGetLock returns a Locker that takes the server's named locks: GET_LOCK(name, 0)
// on a connection of db's pool that the lease then keeps to itself, RELEASE_LOCK on
// Release, after which the connection goes back to the pool. A lease lasts as long as
// its connection's session: there is no per-lease TTL (WithTTL is accepted and
// ignored), Refresh returns errors.ErrUnsupported, and Token is always 0.
//
// Lock names are at most 64 characters and not compared byte for byte by every
// server, so keys are mapped to names by GetLockName: readable for short plain keys,
// a SHA-256 digest otherwise.
//
// Loss: the server frees the lock the moment it ends the session (KILL, shutdown, the
// server process dying) or, for a client that vanished without closing its
// connection (host down, network cut), after the session's wait_timeout of idleness
// (set it with the DSN parameter wait_timeout; the server's default is 8 hours). A
// lease learns of the first kind at once: between its statements it watches its
// connection's socket, and when the server closes it (or writes to it unasked) the
// lease checks its session and, finding it gone, closes Done with ErrLost — before a
// restarted server can grant the lock again (Err: dlock.LossError, CauseSession).
// For the second kind it pings its connection every check interval
// (WithCheckInterval): when a ping fails the connection is dropped and Done closes
// with ErrLost (CauseSession); when a ping has not answered within half of
// wait_timeout less an interval (at least one interval, at most ten seconds:
// dldriver.SessionAnswerWait) Done closes with ErrLost (CauseUnreachable) an interval
// or more before wait_timeout (the interval is cut to a third of it), and the
// connection is kept open until the
// LossError's HeldUntil: a check
// interval later, at most wait_timeout after the last statement that succeeded (or
// until the Locker closes). Closing it sooner would free the lock, on a server that
// hears the close, while the holder may still be stopping what the lock protects.
// The socket is reached in go-sql-driver/mysql's connection by reflection; with
// another driver, or a version that keeps it elsewhere, the pings alone remain, and a
// ping that does not answer closes the connection and ends the lease at once
// (CauseSession). A Release whose RELEASE_LOCK does not answer before its context
// ends drops the connection and gives the lease up as unreachable
// (CauseUnreachable): the server frees the lock when it hears the close.
//
// Acquire waits inside GET_LOCK on the server, which queues the waiters and hands
// the lock to the next one the moment it is released: a client that releases and
// asks again at once queues behind those already waiting (no barging), and no
// retry strategy applies. Cancelling ctx (or closing the Locker) drops the waiting
// connection, which ends the wait on the server. TryAcquire is GET_LOCK(name, 0).
// Not guaranteed: the order of waiters is the server's (MariaDB's metadata locks
// grant waiters of one lock in arrival order); a holder paused for longer than wait_timeout loses the
// lock without knowing until it runs again; no fencing token protects against that.
func NewGetLock(db *sql.DB, opts ...Option) dlock.Locker {
	o := options{getLockConfig: getLockConfig{check: DefaultCheckInterval, maxConns: DefaultMaxConns}}
	o.apply(opts)
	return newGetLockLocker(db, o.getLockConfig)
}

func newGetLockLocker(db *sql.DB, c getLockConfig) dlock.Locker {
	d := &getLockDriver{db: db, cfg: c, conns: make(chan struct{}, c.maxConns), closing: make(chan struct{})}
	return dlock.New(d, dldriver.Info{Name: "mysql+getlock", SessionTTL: true})
}

// maxLockName is the longest name GET_LOCK accepts on MySQL 5.7 and later.
const maxLockName = 64

// readablePrefix and hashedPrefix keep the two forms of GetLockName apart.
const (
	readablePrefix = "dlock:"
	hashedPrefix   = "dlock#"
)

// GetLockName returns the GET_LOCK name NewGetLock uses for key: "dlock:" + key when
// key is at most 58 characters of lower-case ASCII letters, digits and "-_./:" (safe
// under every server's name comparison, which may ignore case, trailing spaces or
// what follows a NUL), else "dlock#" + the first 58 hex digits of key's SHA-256.
// Distinct keys get distinct names (up to a SHA-256 collision). Use it to find a
// lock's holder: SELECT IS_USED_LOCK(name) returns its connection id.
func GetLockName(key string) string {
	if len(readablePrefix)+len(key) <= maxLockName && plainName(key) {
		return readablePrefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return (hashedPrefix + hex.EncodeToString(sum[:]))[:maxLockName]
}

func plainName(key string) bool {
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '/', c == ':':
		default:
			return false
		}
	}
	return true
}

type getLockDriver struct {
	db    *sql.DB
	cfg   getLockConfig
	conns chan struct{} // a slot per connection held by a lease or a waiting acquire

	mu        sync.Mutex
	closed    bool
	closing   chan struct{}  // closed by Close: lingering connections close now
	lingering sync.WaitGroup // checks keeping a given-up lease's connection open (Add under mu, before closed)
}

// linger keeps the caller (a check that gave its lease up) waiting until t, or until
// the driver closes: Close means the owner is done, so the connection may go.
func (d *getLockDriver) linger(t time.Time) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.lingering.Add(1)
	d.mu.Unlock()
	defer d.lingering.Done()
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-d.closing:
	}
}

var _ dldriver.Waiter = (*getLockDriver)(nil)

func (d *getLockDriver) TryLock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	return d.getLock(ctx, key, false)
}

// Lock waits in GET_LOCK until the server grants the lock or ctx ends.
func (d *getLockDriver) Lock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	return d.getLock(ctx, key, true)
}

// maxWait is the longest single GET_LOCK wait; a longer Acquire asks again.
const maxWait = 24 * time.Hour

func (d *getLockDriver) getLock(ctx context.Context, key string, wait bool) (lk dldriver.Lock, err error) {
	select {
	case d.conns <- struct{}{}:
	default:
		return nil, fmt.Errorf("%w: mysql+getlock: all %d connections of this Locker hold or wait for a lock (max_conns)", dlock.ErrUnavailable, d.cfg.maxConns)
	}
	defer func() {
		if lk == nil {
			<-d.conns // no lease keeps the connection
		}
	}()
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, dldriver.WaitErr(ctx, fmt.Errorf("connect: %w", err))
	}
	name := GetLockName(key)
	// First one attempt that does not wait, which also tells this session's id: a
	// wait that ctx ends must end the session on the server (cancelWait).
	// The name is made only of [a-z0-9_./:#-] (GetLockName), so it is safe as a
	// literal; a placeholder would cost a prepare round trip on a fresh statement.
	var got sql.NullInt64
	var waitTimeout, id int64
	sent := time.Now() // before the statement that granted the lock: the session's last one
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK('"+name+"', 0), @@session.wait_timeout, CONNECTION_ID()").Scan(&got, &waitTimeout, &id)
	for wait && err == nil && got.Valid && got.Int64 != 1 && ctx.Err() == nil {
		timeout := maxWait
		if dl, ok := ctx.Deadline(); ok {
			// Whole seconds, rounded up: the context, not the server, ends the wait.
			timeout = min(timeout, time.Until(dl).Truncate(time.Second)+time.Second)
		}
		sent = time.Now()
		err = conn.QueryRowContext(ctx, fmt.Sprintf("SELECT GET_LOCK('%s', %d)", name, int64(timeout/time.Second))).Scan(&got)
		if err != nil && ctx.Err() != nil {
			// The server may still grant the pending GET_LOCK after the client gave up.
			discard(conn)
			return nil, dldriver.WaitErr(ctx, errors.Join(fmt.Errorf("GET_LOCK: %w", err), d.cancelWait(id, name)))
		}
	}
	switch {
	case err != nil:
		discard(conn) // a cancelled GET_LOCK may still have run: ending the session frees it
		return nil, dldriver.WaitErr(ctx, fmt.Errorf("GET_LOCK: %w", err))
	case !got.Valid:
		discard(conn)
		return nil, fmt.Errorf("GET_LOCK(%q) returned NULL", name)
	case got.Int64 != 1:
		conn.Close()
		if wait { // the server's wait ended with ctx
			return nil, dldriver.WaitErr(ctx, errors.New("GET_LOCK timed out"))
		}
		return nil, dldriver.Busy(0)
	}
	check := d.cfg.check
	if w := time.Duration(waitTimeout) * time.Second; w > 0 && check > w/3 {
		check = w / 3
	}
	l := &getLock{d: d, conn: conn, name: name, check: check, idle: time.Duration(waitTimeout) * time.Second,
		turn: make(chan struct{}, 1), lastOK: sent, lost: make(chan struct{}), slot: d.conns,
		sock: sockwatch.New(socketOf(conn))}
	l.watch()
	return l, nil
}

// cancelTimeout bounds the clean-up of a cancelled wait (cancelWait).
const cancelTimeout = time.Second

// cancelWait ends the session id, whose GET_LOCK(name, …) wait was given up by its
// client, and returns once the server has ended it. Closing the client's side of the
// connection is not enough: the server notices only when the wait ends, and if the
// lock is released meanwhile it grants the lock to the abandoned session, which then
// holds it until the server finds the connection gone (milliseconds; the strict part
// of the suite's Cancellation property saw it in 8 of 40 trials). KILL from another
// connection wakes the wait at once; the session may still be granted the lock on its
// way out, so cancelWait waits until the session is gone from the process list —
// then it holds nothing. It returns an error (the lock may be held by the abandoned
// session until the server notices) when that cannot be confirmed within
// cancelTimeout.
func (d *getLockDriver) cancelWait(id int64, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	if _, err := d.db.ExecContext(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != erNoSuchThread {
			return fmt.Errorf("ending the session of the cancelled wait for %q: %w", name, err)
		}
	}
	for {
		var n int
		err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id).Scan(&n)
		if err != nil {
			return fmt.Errorf("waiting for the session of the cancelled wait for %q to end: %w", name, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the session of the cancelled wait for %q did not end within %v", name, cancelTimeout)
		case <-time.After(time.Millisecond): // the server's session list: nothing signals its end
		}
	}
}

// erNoSuchThread is ER_NO_SUCH_THREAD: the session had already ended.
const erNoSuchThread = 1094

func (d *getLockDriver) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.closing)
	}
	d.mu.Unlock()
	d.lingering.Wait()
	if d.cfg.ownDB {
		return d.db.Close()
	}
	return nil
}

// discard closes conn without returning it to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// getLock is one held named lock and the connection whose session holds it.
type getLock struct {
	d     *getLockDriver
	conn  *sql.Conn
	name  string
	check time.Duration
	idle  time.Duration // the session's wait_timeout: the server ends a silent session then (0: unknown)

	// turn is one slot, held by whoever uses the connection: a check, or Unlock — which
	// waits for it no longer than its context allows.
	turn chan struct{}
	// Guarded by turn:
	timer  *time.Timer      // the next check
	sock   *sockwatch.Watch // watches the connection between statements (sessionwatch.go); nil: checks alone
	lastOK time.Time        // taken before the session's last statement that succeeded
	ended  atomic.Bool      // released or lost (set with the turn held; read without it)
	lost   chan struct{}    // closed when the session is found gone, or given up
	slot   chan struct{}    // the Locker's connection slots: one is freed when the connection goes

	mu    sync.Mutex // guards cause
	cause error
}

func (l *getLock) Token() uint64 { return 0 }

func (l *getLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (l *getLock) Lost() <-chan struct{} { return l.lost }

func (l *getLock) Cause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause
}

// take waits for the turn; give hands it back.
func (l *getLock) take() { l.turn <- struct{}{} }
func (l *getLock) give() { <-l.turn }

// watch starts the checks: a ping of the connection every check interval until
// Unlock or a failure. A ping that does not answer within
// dldriver.SessionAnswerWait gives the lease up, at least an interval (and up to
// half of wait_timeout) before the server may end the silent session and free the lock. Between statements the connection's socket is
// watched too (sessionwatch.go): a session the server ends is found at once, not at
// the next check.
func (l *getLock) watch() {
	l.take()
	l.timer = time.AfterFunc(l.check, l.ping)
	l.resumeLocked()
	l.give()
}

// ping is the periodic check.
func (l *getLock) ping() {
	l.take()
	defer l.give()
	if l.ended.Load() {
		return
	}
	if l.checkLocked("failed") {
		l.timer.Reset(l.check)
	}
}

// sessionEnding runs when the socket became readable between statements: the server
// closed the connection or sent something unasked. A ping tells which.
func (l *getLock) sessionEnding() {
	l.take()
	defer l.give()
	if !l.ended.Load() {
		l.checkLocked("was closed by the server")
	}
}

// checkLocked pings the connection and reports whether the session is still there;
// the caller holds the turn. A ping that fails means the server ended the session or
// the connection broke (what says how): the lock may be free already, the lease is
// lost (dldriver.LossSession) and the connection dropped. A ping that has not
// answered yet means nothing: the server keeps the lock while the connection stays
// open, up to wait_timeout of silence, and a busy machine or link answers late. Only
// a ping unanswered after dldriver.SessionAnswerWait gives the lease up (dldriver.LossSilent), and
// the connection is kept open until HeldUntil, a check interval later (at most
// wait_timeout after the last statement that succeeded), so that the lock is not
// freed — by this client closing its connection — while the holder is still being
// stopped — unless the Locker closes first. Without the raw socket (sessionwatch.go)
// a ping cannot be left pending: it ends with its context, which closes the
// connection, and the lease is lost at once.
func (l *getLock) checkLocked(what string) bool {
	l.pauseLocked()
	start := time.Now()
	wait := dldriver.SessionAnswerWait(l.check, l.idle)
	if l.sock == nil {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := l.conn.PingContext(ctx)
		cancel()
		return l.answeredLocked(err, start, what)
	}
	res := make(chan error, 1)
	go func() { res <- l.conn.PingContext(context.Background()) }()
	t := time.NewTimer(wait)
	select {
	case err := <-res:
		t.Stop()
		return l.answeredLocked(err, start, what)
	case <-t.C:
	}
	heldUntil := time.Now().Add(l.check)
	if l.idle > 0 {
		if until := l.lastOK.Add(l.idle - dldriver.StandardDrift(l.idle)); until.Before(heldUntil) {
			heldUntil = until
		}
	}
	l.loseLocked(dldriver.LossSilent, fmt.Errorf("the connection holding GET_LOCK %q did not answer a ping within %v", l.name, wait), heldUntil)
	l.d.linger(heldUntil)  // the connection stays open, the lock held, until then (or Close)
	_ = l.sock.CloseConn() // the pending ping returns; a server that hears it frees the lock
	<-res
	l.dropLocked()
	return false
}

// answeredLocked ends a check whose ping, sent at start, answered err: the session is
// there (nil), or it is gone and the lease lost (driver.LossSession: the lock may be
// free already) with its connection dropped. The caller holds the turn.
func (l *getLock) answeredLocked(err error, start time.Time, what string) bool {
	if err == nil {
		l.lastOK = start
		l.resumeLocked()
		return true
	}
	l.loseLocked(dldriver.LossSession, fmt.Errorf("the connection holding GET_LOCK %q %s: %w", l.name, what, err), time.Time{})
	l.dropLocked()
	return false
}

// loseLocked ends the lease as lost (see dldriver.LossError); the caller holds the turn.
func (l *getLock) loseLocked(kind dldriver.LossKind, cause error, heldUntil time.Time) {
	l.mu.Lock()
	l.cause = &dldriver.LossError{Kind: kind, Err: cause, HeldUntil: heldUntil}
	l.mu.Unlock()
	l.ended.Store(true)
	l.timer.Stop()
	close(l.lost)
}

// pauseLocked stops the socket watch before a statement reads the connection;
// resumeLocked starts it again. The caller holds the turn.
func (l *getLock) pauseLocked() {
	l.sock.Stop()
}

func (l *getLock) resumeLocked() {
	if !l.ended.Load() {
		l.sock.Start(l.sessionEnding)
	}
}

// dropLocked drops the connection (which ends the session and so frees the lock on
// the server) and frees its slot; the caller holds the turn.
func (l *getLock) dropLocked() {
	l.pauseLocked()
	l.ended.Store(true)
	l.timer.Stop()
	discard(l.conn)
	<-l.slot
}

// Unlock releases the lock. It waits for the connection's turn (a check may be using
// it) no longer than ctx allows: then it returns ctx's error and the lease is as it
// was.
func (l *getLock) Unlock(ctx context.Context) error {
	if l.ended.Load() {
		return dlock.ErrNotHeld
	}
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("release GET_LOCK %q: the connection is busy with a check: %w", l.name, ctx.Err())
	}
	defer l.give()
	if l.ended.Load() {
		return dlock.ErrNotHeld
	}
	l.pauseLocked()
	var r sql.NullInt64
	err := l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK('"+l.name+"')").Scan(&r)
	switch {
	case err != nil && ctx.Err() != nil:
		// No answer within ctx (the driver closed the connection): the server frees
		// the lock when it hears the close, or at wait_timeout if it never does. The
		// lock was not found gone: the lease is given up as unreachable (the lock may
		// be free already: no HeldUntil), and Release says it did not get an answer.
		l.loseLocked(dldriver.LossSilent, fmt.Errorf("RELEASE_LOCK %q did not answer before its context ended: %w", l.name, err), time.Time{})
		l.dropLocked()
		return fmt.Errorf("release GET_LOCK %q: no answer: %w", l.name, err)
	case err != nil:
		// The session may still hold the lock (a slow network) or be gone (killed,
		// server restarted): either way dropping the connection ends it.
		l.dropLocked()
		return fmt.Errorf("%w: RELEASE_LOCK on a failed connection: %w", dlock.ErrNotHeld, err)
	case r.Int64 != 1:
		// NULL: no such lock; 0: another session's. Either way not ours any more.
		l.dropLocked()
		return dlock.ErrNotHeld
	}
	l.ended.Store(true)
	l.timer.Stop()
	l.conn.Close()
	<-l.slot
	return nil
}

// TryLockSemaphore takes a permit of the generic semaphore (package
// internal/generic): one of limit named locks per key, each a GET_LOCK of its own.
// Limits are not compared, tokens are 0, and waiters poll.
func (d *getLockDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (dldriver.Lock, error) {
	return generic.Semaphore{D: d}.TryLockSemaphore(ctx, key, limit, ttl)
}
