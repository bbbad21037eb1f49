package pglock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List). Reads only: no lock is taken, nothing is
// written, and no table is created (WithMigrate does not apply).
//
// The lease table: a key's row names its owner (the grant's uuid), its token and its
// expiry by the server's clock (statement_timestamp(), as the locks' own
// statements); the queue rows (both modes) name each waiter, in order, and the time
// its place lasts; the holders table has each permit's or shared lease's owner,
// token and expiry, and the semaphore's limit (its settings row); the elections
// table each term (the live one's owner, value and term). Only rows whose expiry
// has not passed are shown. The row keeps no grant time and no Holder record: a
// lock taken WithHolder writes its record into OwnersTable after the grant, in the
// background (one statement more for the server, none on the caller's path), and a
// description shows it, and its Since, while the lock table still names that
// owner. Semaphores', read-write locks', elections' and waiters' records are not
// kept. A table that is missing or that the user may not read shows nothing.
//
// Advisory locks: pg_locks shows the server sessions that hold an advisory lock
// (granted) or wait for it, and pg_stat_activity each session's user and client
// address. The key registry gives each lock id its key, so a key never registered
// shows nothing, and advisory locks of other programs are not shown. No token and
// no time left (a lock lasts as long as its session), no grant time; a waiter's
// Since is when its wait began (pg_locks.waitstart). A user that is neither a
// superuser nor a member of pg_read_all_stats sees the client address only of its
// own role's sessions (PostgreSQL hides the others'): the holders and waiters are
// all shown, some without an address.

// OwnersTable is the name of the table, beside the lock table named table, that
// keeps the Holder record of each key's current lock (dlock.WithHolder), written
// after the grant, in the background. Migrate creates it (and so does the
// postgres:// opener when it creates the lock table); without it, or without the
// privileges to write it, records are not kept (nothing fails).
func OwnersTable(table string) string { return table + ownersSuffix }

const ownersSuffix = "_owners"

const createOwners = `CREATE TABLE IF NOT EXISTS %s (
  lock_key bytea PRIMARY KEY,
  owner    uuid NOT NULL,
  holder   bytea NOT NULL
)`

// recordSQL keeps a key's holder record, unless the lock table no longer names its
// owner (a record written late must not replace a newer holder's). %[1]s is the
// owners table, %[2]s the lock table. Arguments: key, owner, record.
const recordSQL = `INSERT INTO %[1]s AS o (lock_key, owner, holder)
SELECT $1::bytea, $2::uuid, $3::bytea WHERE EXISTS (SELECT 1 FROM %[2]s WHERE lock_key = $1::bytea AND owner = $2::uuid)
ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner, holder = EXCLUDED.holder`

// record writes l's holder record (if its acquire carried one) into the owners
// table, in the background: best effort, after the grant.
func (l *tableLock) record() {
	if l.holder == nil {
		return
	}
	l.d.inBackground(func(ctx context.Context) { _, _ = l.d.pool.Exec(ctx, l.d.s().record, l.key, l.owner, l.holder) })
}

var (
	_ driver.Describer = (*tableDriver)(nil)
	_ driver.Describer = fairDriver{}
	_ driver.Describer = (*advisoryDriver)(nil)
)

// missing reports whether err says a table does not exist (undefined_table) or may
// not be read (insufficient_privilege): a table this deployment never made (the
// queue table, the owners table) or one the user holds no privilege on shows
// nothing.
func missing(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "42501")
}

// read runs q (a format: %s is the quoted table) with args and calls row for each
// row; a missing table has no rows. Its errors name the table.
func read(ctx context.Context, pool *pgxpool.Pool, table, q string, row func(pgx.Rows) error, args ...any) error {
	rows, err := pool.Query(ctx, fmt.Sprintf(q, quoteIdent(table)), args...)
	if err == nil {
		for err == nil && rows.Next() {
			err = row(rows)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil && !missing(err) {
		return fmt.Errorf("read %s: %w", quoteIdent(table), err)
	}
	return nil
}

// left is a time left of us microseconds (remainingExpr's).
func left(us int64) time.Duration { return max(time.Duration(us)*time.Microsecond, 0) }

// Describe reads key's row in the lock table (its live holder: owner, token, time
// left, and the record OwnersTable keeps for that owner, with its Since), its live
// waiters in the queue in their order (each with the time its place
// lasts), the live holders of its semaphore or read-write lock in the holders table
// (owner, token, time left, shared or not; a semaphore's limit from the key's
// settings row), and the live term of the election of that name (the leader's
// owner, value, term as token, time left). Queue is true with WithFIFO, or when the
// queue table holds waiters for key (the default mode's waiters queue too, but may
// be passed by callers within the barging window). It returns the database's
// error, naming the table it read; a missing or unreadable table shows nothing.
//
// Not guaranteed: each table is read by a statement of its own, so the parts are
// not one snapshot; a record is written after its grant and may be missing for a
// moment, or for good (best effort); waiters that do not queue (an Acquire with
// dlock.WithRetry, or the default mode where the queue table lacks its since
// column or the user's privileges on it) are not shown.
func (d *tableDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	t, k := d.opts.table, []byte(key)
	var out []driver.KeyState
	lock := driver.KeyState{Key: key, Kind: driver.KindLock, Queue: d.opts.fifo}
	err := read(ctx, d.pool, t, `SELECT owner::text, token, `+remainingExpr+`
FROM %s WHERE lock_key = $1 AND expires_at > statement_timestamp()`, func(r pgx.Rows) error {
		var e driver.Entry
		var us int64
		if err := r.Scan(&e.Owner, &e.Token, &us); err != nil {
			return err
		}
		e.TTL = left(us)
		lock.Holders = append(lock.Holders, e)
		return nil
	}, k)
	if err != nil {
		return nil, err
	}
	if len(lock.Holders) == 1 {
		h := &lock.Holders[0]
		err = read(ctx, d.pool, OwnersTable(t), `SELECT holder FROM %s WHERE lock_key = $1 AND owner::text = $2`, func(r pgx.Rows) error {
			var b []byte
			if err := r.Scan(&b); err != nil {
				return err
			}
			var rec driver.Holder
			if json.Unmarshal(b, &rec) == nil {
				h.Holder, h.Since = &rec, rec.Since
			}
			return nil
		}, k, h.Owner)
		if err != nil {
			return nil, err
		}
	}
	err = read(ctx, d.pool, QueueTable(t), `SELECT waiter::text, `+remainingExpr+`
FROM (SELECT seq, waiter, deadline AS expires_at FROM %s WHERE lock_key = $1) q
WHERE expires_at > statement_timestamp() ORDER BY seq`, func(r pgx.Rows) error {
		var e driver.Entry
		var us int64
		if err := r.Scan(&e.Owner, &us); err != nil {
			return err
		}
		e.TTL = left(us)
		lock.Waiters = append(lock.Waiters, e)
		lock.Queue = true
		return nil
	}, k)
	if err != nil {
		return nil, err
	}
	if len(lock.Holders)+len(lock.Waiters) > 0 {
		out = append(out, lock)
	}

	prim := driver.KeyState{Key: key}
	err = read(ctx, d.pool, HoldersTable(t), `SELECT owner = $2, owner::text, kind, lim, token, `+remainingExpr+`
FROM %s WHERE lock_key = $1 AND (owner = $2 OR expires_at > statement_timestamp())`, func(r pgx.Rows) error {
		var settings bool
		var kind string
		var lim int
		var e driver.Entry
		var us int64
		if err := r.Scan(&settings, &e.Owner, &kind, &lim, &e.Token, &us); err != nil {
			return err
		}
		switch {
		case settings && kind == kindRW:
			prim.Kind, prim.Limit = driver.KindRWLock, 0
		case settings:
			prim.Kind, prim.Limit = driver.KindSemaphore, lim
		default:
			if prim.Kind == "" { // until the settings row says (it always exists beside a holder)
				prim.Kind = driver.KindRWLock
				if kind == modePermit {
					prim.Kind = driver.KindSemaphore
				}
			}
			e.TTL, e.Shared = left(us), kind == modeShared
			prim.Holders = append(prim.Holders, e)
		}
		return nil
	}, k, settingsOwner)
	if err != nil {
		return nil, err
	}
	if len(prim.Holders) > 0 {
		out = append(out, prim)
	}

	err = read(ctx, d.pool, ElectionsTable(t), `SELECT term, owner::text, value, `+remainingExpr+`
FROM %s WHERE name = $1 AND expires_at > statement_timestamp() ORDER BY term DESC LIMIT 1`, func(r pgx.Rows) error {
		var e driver.Entry
		var value []byte
		var us int64
		if err := r.Scan(&e.Token, &e.Owner, &value, &us); err != nil {
			return err
		}
		e.Value, e.TTL = string(value), left(us)
		out = append(out, driver.KeyState{Key: key, Kind: driver.KindElection, Holders: []driver.Entry{e}})
		return nil
	}, k)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// List reads the keys under prefix that have a live row in the lock table, the
// queue table, the holders table or the elections table (a byte-wise prefix
// comparison: % and _ are plain bytes), and describes each, in order. Errors are
// Describe's.
//
// Not guaranteed: the tables are read one after another, then each key; a key
// taken meanwhile may be missed. The prefix uses no index: each table is read
// whole (the lock table keeps a row for every key ever locked).
func (d *tableDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	t := d.opts.table
	names := map[string]bool{}
	for _, q := range []struct{ table, sql string }{
		{t, `SELECT lock_key FROM %s WHERE substring(lock_key FROM 1 FOR $1) = $2 AND expires_at > statement_timestamp()`},
		{QueueTable(t), `SELECT DISTINCT lock_key FROM %s WHERE substring(lock_key FROM 1 FOR $1) = $2 AND deadline > statement_timestamp()`},
		{HoldersTable(t), `SELECT DISTINCT lock_key FROM %s WHERE substring(lock_key FROM 1 FOR $1) = $2 AND expires_at > statement_timestamp()`},
		{ElectionsTable(t), `SELECT DISTINCT name FROM %s WHERE substring(name FROM 1 FOR $1) = $2 AND expires_at > statement_timestamp()`},
	} {
		err := read(ctx, d.pool, q.table, q.sql, func(r pgx.Rows) error {
			var k []byte
			if err := r.Scan(&k); err != nil {
				return err
			}
			names[string(k)] = true
			return nil
		}, int32(len(prefix)), []byte(prefix))
		if err != nil {
			return nil, err
		}
	}
	return generic.DescribeAll(ctx, names, d.Describe)
}

// advisoryLocksSQL reads this database's advisory locks in their bigint form (high
// half in classid, low half in objid, objsubid 1) that the registry (%s) names,
// held or awaited, with what pg_stat_activity shows of each session; holders
// first, then waiters in the order their waits began. A condition on the
// registry's name (r.lock_key) may follow.
const advisoryLocksSQL = `SELECT r.lock_key, l.granted, l.mode = 'ShareLock', l.pid, a.usename, host(a.client_addr), a.client_port, l.waitstart
FROM pg_locks l
JOIN %s r ON r.id = (l.classid::bigint << 32) | l.objid::bigint
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

const advisoryOrder = `
ORDER BY l.granted DESC, l.waitstart NULLS LAST, l.pid`

// advisoryClaim is a session's hold on, or wait for, an advisory lock.
type advisoryClaim struct {
	name    string // the registry's name of the lock
	granted bool
	e       driver.Entry
}

// claims reads the advisory locks named in the registry (all with names nil, else
// those of names) and their sessions.
func (d *advisoryDriver) claims(ctx context.Context, names [][]byte) ([]advisoryClaim, error) {
	q, args := advisoryLocksSQL+advisoryOrder, []any(nil)
	if names != nil {
		q, args = advisoryLocksSQL+`
  AND r.lock_key = ANY($1::bytea[])`+advisoryOrder, []any{names}
	}
	var out []advisoryClaim
	err := read(ctx, d.pool, d.opts.registry, q, func(r pgx.Rows) error {
		var c advisoryClaim
		var name []byte
		var pid, port *int32
		var user, addr *string
		var since *time.Time
		if err := r.Scan(&name, &c.granted, &c.e.Shared, &pid, &user, &addr, &port, &since); err != nil {
			return err
		}
		c.name = string(name)
		if pid != nil {
			c.e.Owner = "pid " + strconv.Itoa(int(*pid))
		}
		if user != nil {
			c.e.Owner += " (" + *user + ")"
		}
		if addr != nil && port != nil && *port > 0 {
			c.e.Address = net.JoinHostPort(*addr, strconv.Itoa(int(*port)))
		}
		if since != nil && !c.granted {
			c.e.Since = *since
		}
		out = append(out, c)
		return nil
	}, args...)
	return out, err
}

// Describe reads, from pg_locks joined with the key registry and pg_stat_activity,
// the sessions that hold or wait for key's advisory lock, those of its read-write
// lock (shared or exclusive) and those that hold its semaphore's slots. Each is
// named by its server process id and user ("pid 4242 (app)"), with its client's
// host:port where pg_stat_activity shows it; a waiter's Since is when its wait
// began. Waiters are in the order their waits began (Queue true: the server queues
// them in that order, unless its deadlock detector reorders a queue). A semaphore
// is the generic one: its holders have no token and its limit is not recorded; its
// waiters poll and are not shown. It returns the database's error; a missing or
// unreadable registry shows nothing.
//
// Not guaranteed: no token, no time left (a lock lasts as long as its session), no
// grant time and no Holder record; a key never registered, and advisory locks that
// other programs take with ids of their own, show nothing; without superuser or
// pg_read_all_stats, other roles' sessions show no address.
func (d *advisoryDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	rw, slots := driver.RWWake(key), generic.SlotKeys(key)
	names := [][]byte{[]byte(key), []byte(rw)}
	for _, s := range slots {
		names = append(names, []byte(s))
	}
	claims, err := d.claims(ctx, names)
	if err != nil {
		return nil, err
	}
	lock := driver.KeyState{Key: key, Kind: driver.KindLock, Queue: true}
	rwl := driver.KeyState{Key: key, Kind: driver.KindRWLock, Queue: true}
	held := map[string]driver.Entry{}
	for _, c := range claims {
		st := &lock
		switch c.name {
		case key:
			c.e.Shared = false // a mutex's lock is exclusive
		case rw:
			st = &rwl
		default:
			if _, ok := held[c.name]; c.granted && !ok {
				c.e.Shared = false
				held[c.name] = c.e
			}
			continue
		}
		if c.granted {
			st.Holders = append(st.Holders, c.e)
		} else {
			st.Waiters = append(st.Waiters, c.e)
		}
	}
	var out []driver.KeyState
	for _, st := range []driver.KeyState{lock, rwl} {
		if len(st.Holders)+len(st.Waiters) > 0 {
			out = append(out, st)
		}
	}
	if st, ok := generic.SemaphoreOf(key, func(i int) (driver.Entry, bool) {
		e, ok := held[slots[i]]
		return e, ok
	}); ok {
		out = append(out, st)
	}
	return out, nil
}

// List reads every advisory lock of this database that the registry names, held or
// awaited, takes the key of each (a read-write lock's, a semaphore slot's), keeps
// those under prefix and describes each, in order. Errors are Describe's.
//
// Not guaranteed: advisory locks taken with ids the registry does not know are not
// listed; a key taken while List reads may be missed.
func (d *advisoryDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	claims, err := d.claims(ctx, nil)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, c := range claims {
		k := c.name
		if s, ok := generic.ParseSlotKey(k); ok {
			k = s
		} else if r, ok := strings.CutPrefix(k, driver.RWWake("")); ok {
			k = r
		}
		if k != "" && utf8.ValidString(k) && strings.HasPrefix(k, prefix) {
			keys[k] = true
		}
	}
	return generic.DescribeAll(ctx, keys, d.Describe)
}
