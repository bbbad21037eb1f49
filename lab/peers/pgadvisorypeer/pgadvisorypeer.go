// Package pgadvisorypeer presents PostgreSQL's session advisory locks,
// pg_advisory_lock and pg_advisory_unlock, as a dlock.Locker, written the way an
// application usually writes them with pgx v5, so that the conformance suite and the
// fault scenarios run on them beside dlock's own backends.
//
// The usual way, and the one taken here: a session advisory lock belongs to a
// session, that is a connection, so each lease takes a connection of its own from
// the pool (pgxpool.Pool.Acquire), runs `SELECT pg_try_advisory_lock(hashtext($1))`
// (TryAcquire) or `SELECT pg_advisory_lock(hashtext($1))` (Acquire) on it, keeps it
// while the lock is held, and at Release runs `SELECT pg_advisory_unlock(hashtext($1))`
// on the same connection and gives it back. (Running them on the pool itself sends
// the unlock to whichever connection is free, which usually is not the owner.) When
// an Acquire's ctx ends, pgx gives up the connection under the waiting query, sends
// the server a cancel request and closes the connection, which ends the wait on the
// server.
//
// The key is mapped to the lock's bigint id as users usually map it: hashtext, in
// SQL. hashtext is a 32-bit hash, an internal function of PostgreSQL's that its
// documentation does not list: two keys whose hashes collide are one lock, and
// nothing says so (TestHashCollisionSharesALock finds such a pair).
//
// The adapter is a dlock driver (package driver) and runs under dlock.New like every
// backend, so its leases are dlock's own (Done/Err, Observer events).
//
// What follows from session advisory locks, and is measured by the tests: the lock
// lasts as long as the session (WithTTL is ignored, Refresh returns
// errors.ErrUnsupported); a connection that closes — the client crashed, or the
// network cut it — frees the lock at once, and nothing tells a client whose
// connection was cut: pgx learns of it only at the next query, so Done closes only at
// Release (which then returns ErrNotHeld) or Close. A session whose client went
// silent (paused, cut off without a close) keeps its locks until the server's TCP
// keepalive gives up on it, or idle_session_timeout (0, never, by default). A key with
// a NUL byte is not PostgreSQL text: its TryAcquire and Acquire fail. Token is 0.
package pgadvisorypeer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	dldriver "github.com/dlock-go/dlock/driver"
)

// Name is the peer's name in errors.
const Name = "postgres pg_advisory_lock"

// The statements, as users write them.
const (
	trySQL    = "SELECT pg_try_advisory_lock(hashtext($1))"
	lockSQL   = "SELECT pg_advisory_lock(hashtext($1))"
	unlockSQL = "SELECT pg_advisory_unlock(hashtext($1))"
)

// dropTimeout bounds the Close of a connection the driver gives up at its own Close.
const dropTimeout = time.Second

// New returns a Locker that takes session advisory locks through pool. Every held or
// waiting lease keeps one of pool's connections: a pool of pgxpool's default size
// (4, or the number of CPUs) holds that many locks at most, and a lease beyond
// them, TryAcquire's too, waits for a connection. Close gives up the leases still
// held (closing the connection of one whose Release failed, so that its session
// ends) but does not close pool.
func New(pool *pgxpool.Pool) dlock.Locker {
	return dlock.New(&advisoryDriver{pool: pool, held: map[*advisoryLock]struct{}{}}, dldriver.Info{Name: Name, SessionTTL: true})
}

// advisoryDriver keeps the locks whose connections it has not given back, so that
// its Close can give them back: pgxpool's Close waits for every acquired connection.
type advisoryDriver struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	held   map[*advisoryLock]struct{}
	closed bool
}

var _ dldriver.Waiter = (*advisoryDriver)(nil)

// TryLock is pg_try_advisory_lock(hashtext(key)).
func (d *advisoryDriver) TryLock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	return d.lock(ctx, key, false)
}

// Lock is pg_advisory_lock(hashtext(key)), which waits until the lock is free or ctx
// ends.
func (d *advisoryDriver) Lock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	return d.lock(ctx, key, true)
}

func (d *advisoryDriver) lock(ctx context.Context, key string, wait bool) (dldriver.Lock, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	got := true
	if wait {
		_, err = conn.Exec(ctx, lockSQL, key)
	} else {
		err = conn.QueryRow(ctx, trySQL, key).Scan(&got)
	}
	switch {
	case err != nil:
		conn.Release() // a connection closed under a cancelled query is destroyed, not pooled
		return nil, ctxErr(ctx, err)
	case !got:
		conn.Release()
		return nil, dldriver.Busy(0)
	}
	l := &advisoryLock{d: d, key: key, conn: conn}
	d.mu.Lock()
	closed := d.closed
	if !closed {
		d.held[l] = struct{}{}
	}
	d.mu.Unlock()
	if closed { // granted after Close gave up on this call
		l.drop()
		return nil, dlock.ErrClosed
	}
	return l, nil
}

// ctxErr returns err, joined with ctx's error when ctx has ended and err does not
// already say so.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return errors.Join(cerr, err)
	}
	return err
}

// Close gives back the connections of the locks not released (a Release that failed,
// a lease given up): each is closed first, which ends its session and frees its lock
// on the server. A lock whose Unlock is running is given back by that Unlock.
func (d *advisoryDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	held := make([]*advisoryLock, 0, len(d.held))
	for l := range d.held {
		held = append(held, l)
	}
	d.held = nil
	d.mu.Unlock()
	for _, l := range held {
		l.mu.Lock()
		if l.busy {
			l.orphaned = true
		} else if l.conn != nil {
			l.drop()
		}
		l.mu.Unlock()
	}
	return nil
}

// advisoryLock is one session advisory lock held by the session of conn.
type advisoryLock struct {
	d   *advisoryDriver
	key string

	mu       sync.Mutex
	conn     *pgxpool.Conn // nil once given back to the pool
	busy     bool          // an Unlock is using conn (dlock runs one at a time)
	orphaned bool          // the driver closed meanwhile: the Unlock gives conn back
}

func (l *advisoryLock) Token() uint64 { return 0 }

func (l *advisoryLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (l *advisoryLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	conn := l.conn
	if conn == nil {
		l.mu.Unlock()
		return fmt.Errorf("%w: its connection was given back", dlock.ErrNotHeld)
	}
	l.busy = true
	l.mu.Unlock()

	var freed bool
	var err error
	if conn.Conn().IsClosed() { // an earlier Unlock's ctx ended mid-query: pgx closed it
		err = errors.New("the connection was closed")
	} else {
		err = conn.QueryRow(ctx, unlockSQL, l.key).Scan(&freed)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.busy = false
	switch {
	case err != nil && (ctx.Err() != nil || !conn.Conn().IsClosed()):
		// The connection stays with the lease, so that Release may be retried (a
		// connection pgx closed when ctx ended then says ErrNotHeld), unless the
		// driver closed meanwhile.
		if l.orphaned {
			l.drop()
		}
		return ctxErr(ctx, err)
	case err != nil:
		l.giveBack()
		return fmt.Errorf("%w: the connection that held it is gone: %w", dlock.ErrNotHeld, err)
	}
	l.giveBack()
	if !freed { // the session did not hold it
		return fmt.Errorf("%w: pg_advisory_unlock returned false", dlock.ErrNotHeld)
	}
	return nil
}

// giveBack returns conn to the pool (which destroys a closed one) and forgets the
// lock. l.mu is held.
func (l *advisoryLock) giveBack() {
	l.conn.Release()
	l.conn = nil
	l.d.mu.Lock()
	delete(l.d.held, l)
	l.d.mu.Unlock()
}

// drop closes conn, which ends its session and so frees the lock on the server, and
// gives it back. l.mu is held, or l is not shared yet.
func (l *advisoryLock) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
	defer cancel()
	_ = l.conn.Conn().Close(ctx)
	l.giveBack()
}
