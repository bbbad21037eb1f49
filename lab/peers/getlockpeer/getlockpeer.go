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
// The adapter is a dlock driver (package driver) and runs under dlock.New like every
// backend, so its leases are dlock's own (Done/Err, Observer events).
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
	dldriver "github.com/dlock-go/dlock/driver"
)

// Name is the peer's name in errors.
const Name = "mysql GET_LOCK"

// forever is the GET_LOCK timeout, in seconds, of an Acquire whose ctx has no deadline.
const forever = 365 * 24 * 3600

// New returns a Locker that takes GET_LOCK named locks through db. Close releases the
// leases still held but does not close db.
func New(db *sql.DB) dlock.Locker {
	return dlock.New(&getLockDriver{db: db}, dldriver.Info{Name: Name, SessionTTL: true})
}

type getLockDriver struct{ db *sql.DB }

var _ dldriver.Waiter = (*getLockDriver)(nil)

// TryLock is GET_LOCK(key, 0).
func (d *getLockDriver) TryLock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	return d.lock(ctx, key, 0)
}

// Lock is GET_LOCK(key, the seconds left before ctx's deadline, or a year).
func (d *getLockDriver) Lock(ctx context.Context, key string, _ time.Duration) (dldriver.Lock, error) {
	timeout := float64(forever)
	if dl, ok := ctx.Deadline(); ok {
		timeout = math.Max(0, math.Ceil(time.Until(dl).Seconds()))
	}
	return d.lock(ctx, key, timeout)
}

func (d *getLockDriver) lock(ctx context.Context, key string, timeout float64) (dldriver.Lock, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", key, timeout).Scan(&got)
	switch {
	case err != nil:
		_ = conn.Close()
		return nil, err
	case !got.Valid:
		_ = conn.Close()
		return nil, fmt.Errorf("GET_LOCK returned NULL")
	case got.Int64 != 1:
		_ = conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, dldriver.Busy(0)
	}
	return &namedLock{conn: conn, key: key}, nil
}

func (d *getLockDriver) Close() error { return nil }

// namedLock is one GET_LOCK held by the connection conn.
type namedLock struct {
	conn *sql.Conn
	key  string
}

func (l *namedLock) Token() uint64 { return 0 }

func (l *namedLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }

func (l *namedLock) Unlock(ctx context.Context) error {
	var freed sql.NullInt64
	err := l.conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", l.key).Scan(&freed)
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn):
		_ = l.conn.Close()
		return fmt.Errorf("%w: the connection that held it is gone: %w", dlock.ErrNotHeld, err)
	case err != nil:
		return err // the connection stays with the lease: Release may be retried
	}
	_ = l.conn.Close()
	if freed.Int64 != 1 { // 0: another connection holds it; NULL: nobody does
		return fmt.Errorf("%w: RELEASE_LOCK returned %v", dlock.ErrNotHeld, freed)
	}
	return nil
}
