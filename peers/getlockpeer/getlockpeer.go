// Package getlockpeer presents MySQL's (and MariaDB's) named locks, GET_LOCK and
// RELEASE_LOCK, as a dlock.Locker, written the way an application usually writes them
// with database/sql, so that the conformance suite, the fault scenarios and the
// benchmarks run on them beside dlock's own backends.
//
// The usual way, and the one taken here: a named lock belongs to a connection, so
// each lease takes a connection of its own from the pool (db.Conn), runs
// `SELECT GET_LOCK(?, timeout)` on it, keeps it while the lock is held, and at Release
// runs `SELECT RELEASE_LOCK(?)` on the same connection and gives it back. (Running
// both on the pooled *sql.DB instead, as the naivest code does, sends RELEASE_LOCK to
// whichever connection is free, which usually is not the owner: the lock then stays
// held by an idle pooled connection.) TryAcquire passes timeout 0; Acquire passes the
// seconds left before ctx's deadline (a year without one) and, when ctx is cancelled,
// the driver closes the connection, which ends the wait on the server.
//
// What follows from GET_LOCK, and is measured by the tests: the lock lasts as long as
// the connection (WithTTL is ignored, Refresh returns errors.ErrUnsupported); a
// connection that closes — the client crashed, or the network cut it — frees the lock
// at once, and nothing tells a client whose connection was cut: database/sql learns of
// it only at the next query, so Done closes only at Release (which then returns
// ErrNotHeld) or Close. Token is 0.
// Lock names are whatever the server takes: names longer than 64 characters are
// rejected by MySQL; MariaDB compares them as its collation does.
package getlockpeer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerlease"
)

// Name is the peer's name in errors.
const Name = "mysql GET_LOCK"

// forever is the GET_LOCK timeout, in seconds, of an Acquire whose ctx has no deadline.
const forever = 365 * 24 * 3600

// New returns a Locker that takes named locks on db's server. Each held lease keeps
// one of db's connections. Close releases the leases still held but does not close db.
func New(db *sql.DB) dlock.Locker {
	return &locker{db: db, set: peerlease.NewSet(Name)}
}

type locker struct {
	db  *sql.DB
	set *peerlease.Set
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	timeout := float64(forever)
	if d, ok := ctx.Deadline(); ok {
		timeout = math.Max(0, math.Ceil(time.Until(d).Seconds()))
	}
	return l.lock(ctx, key, opts, timeout)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.lock(ctx, key, opts, 0)
}

func (l *locker) lock(ctx context.Context, key string, opts []dlock.Option, timeout float64) (dlock.Lease, error) {
	o, err := l.set.Begin(key, opts)
	if err != nil {
		return nil, err
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, l.set.NotAcquired(ctx, key, err)
		}
		return nil, l.set.Failed(key, err)
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", key, timeout).Scan(&got)
	switch {
	case err != nil && ctx.Err() != nil:
		_ = conn.Close()
		return nil, l.set.NotAcquired(ctx, key, err)
	case err != nil:
		_ = conn.Close()
		return nil, l.set.Failed(key, err)
	case !got.Valid:
		_ = conn.Close()
		return nil, l.set.Failed(key, fmt.Errorf("GET_LOCK returned NULL"))
	case got.Int64 != 1:
		_ = conn.Close()
		return nil, l.set.NotAcquired(ctx, key, nil)
	}
	return l.set.Grant(key, 0, time.Time{}, o, peerlease.Hooks{
		Release: func(ctx context.Context) error {
			var freed sql.NullInt64
			err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", key).Scan(&freed)
			switch {
			case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn):
				// The connection is gone, and with it the lock (the server frees a
				// closed connection's locks).
				_ = conn.Close()
				return fmt.Errorf("%w: the connection that held it is gone: %w", dlock.ErrNotHeld, err)
			case err != nil:
				return err // the connection stays with the lease: Release may be retried
			}
			_ = conn.Close()
			if freed.Int64 != 1 { // 0: another connection holds it; NULL: nobody does
				return fmt.Errorf("%w: RELEASE_LOCK returned %v", dlock.ErrNotHeld, freed)
			}
			return nil
		},
	})
}

// Close releases the leases still held (RELEASE_LOCK, then the connection goes back
// to the pool) and ends them with dlock.ErrClosed. It does not close db. Idempotent.
func (l *locker) Close() error {
	l.set.Close()
	return nil
}
