package mysqllock

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/backends/internal/generic"
	dldriver "github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List).
//
// The table: a key's row names its owner (16 random bytes, shown in hex), its token
// and its expiry by the server's clock; the fair mode's queue rows name each
// waiter, in order, and its deadline; the holders table has each permit's or shared
// lease's owner, token and expiry, and the semaphore's limit; the elections table
// each term. The row keeps no grant time and has no room for a Holder record (its
// columns have fixed sizes, for updates in place): a lock taken WithHolder writes
// its record into OwnersTable after the grant, in the background (one statement
// more for the server, none on the caller's path), and a description shows it while
// it names the row's current owner. Semaphores', read-write locks' and waiters'
// records are not kept.
//
// GET_LOCK: the server tells the connection that holds a name (IS_USED_LOCK) and,
// from its process list, that connection's user and client address and the
// connections waiting in GET_LOCK for the name; nothing else (no token, no time
// left: the lock lasts as long as the session). A user without the PROCESS
// privilege sees only its own connections there. Listing needs a list of the
// server's named locks: MariaDB's METADATA_LOCK_INFO plugin or MySQL's
// performance_schema.metadata_locks.

// OwnersTable is the name of the table, beside the lock table named table, that
// keeps the Holder record of each key's current lock (dlock.WithHolder). Migrate
// creates it; without it, records are not kept (nothing fails).
func OwnersTable(table string) string { return table + "_owners" }

const createOwners = `CREATE TABLE IF NOT EXISTS %s (
  lock_key VARBINARY(255) NOT NULL,
  owner    BINARY(16) NOT NULL,
  holder   VARBINARY(1024) NOT NULL,
  PRIMARY KEY (lock_key)
) ENGINE=InnoDB`

// recordSQL keeps a key's holder record. Arguments: key, owner, record.
const recordSQL = `INSERT INTO %s (lock_key, owner, holder) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), holder = VALUES(holder)`

func migrateOwners(ctx context.Context, db *sql.DB, table string) error {
	name := OwnersTable(table)
	if len([]rune(name)) > 64 {
		return fmt.Errorf("table name %q: the owners table %q would be longer than 64 characters", table, name)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createOwners, quoteIdent(name))); err != nil {
		return fmt.Errorf("create table %s: %w", quoteIdent(name), err)
	}
	return nil
}

// record writes l's holder record (if its acquire carried one) into the owners
// table, in the background: best effort, after the grant.
func (l *tableLock) record() {
	if l.holder == nil {
		return
	}
	l.d.inBackground(func(ctx context.Context) {
		_, _ = l.d.db.ExecContext(ctx, fmt.Sprintf(recordSQL, quoteIdent(OwnersTable(l.d.cfg.table))), l.key, l.owner[:], l.holder)
	})
}

var (
	_ dldriver.Describer = (*tableDriver)(nil)
	_ dldriver.Describer = (*getLockDriver)(nil)
)

// missing reports whether err says a table does not exist, or may not be read: a
// table this deployment never made (the fair mode's queue, the owners table), or
// one the user holds no privilege on, shows nothing.
func missing(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == erNoSuchTable || me.Number == erTableAccessDenied)
}

// query runs q (a format of the quoted table) on table and calls row for each row;
// a missing table has no rows.
func (d *tableDriver) query(ctx context.Context, table, q string, row func(*sql.Rows) error, args ...any) error {
	rows, err := d.db.QueryContext(ctx, fmt.Sprintf(q, quoteIdent(table)), args...)
	if missing(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// left is the time left until a moment µs away by the server's clock.
func left(us int64) time.Duration { return max(time.Duration(us)*time.Microsecond, 0) }

func (d *tableDriver) Describe(ctx context.Context, key string) ([]dldriver.KeyState, error) {
	t := d.cfg.table
	var out []dldriver.KeyState
	lock := dldriver.KeyState{Key: key, Kind: dldriver.KindLock, Queue: d.cfg.fifo}
	err := d.query(ctx, t, `SELECT t.owner, t.token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), t.expires_at)
FROM %s t WHERE t.lock_key = ? AND t.expires_at > UTC_TIMESTAMP(6)`, func(r *sql.Rows) error {
		var owner []byte
		var e dldriver.Entry
		var us int64
		if err := r.Scan(&owner, &e.Token, &us); err != nil {
			return err
		}
		e.Owner, e.TTL = hex.EncodeToString(owner), left(us)
		lock.Holders = append(lock.Holders, e)
		return nil
	}, key)
	if err != nil {
		return nil, err
	}
	if len(lock.Holders) == 1 {
		err = d.query(ctx, OwnersTable(t), `SELECT holder FROM %s WHERE lock_key = ? AND owner = ?`, func(r *sql.Rows) error {
			var b []byte
			if err := r.Scan(&b); err != nil {
				return err
			}
			var h dldriver.Holder
			if json.Unmarshal(b, &h) == nil {
				lock.Holders[0].Holder, lock.Holders[0].Since = &h, h.Since
			}
			return nil
		}, key, mustHex(lock.Holders[0].Owner))
		if err != nil {
			return nil, err
		}
	}
	err = d.query(ctx, t+QueueSuffix, `SELECT waiter, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), deadline)
FROM %s WHERE lock_key = ? AND deadline > UTC_TIMESTAMP(6) ORDER BY seq`, func(r *sql.Rows) error {
		var owner []byte
		var us int64
		if err := r.Scan(&owner, &us); err != nil {
			return err
		}
		lock.Waiters = append(lock.Waiters, dldriver.Entry{Owner: hex.EncodeToString(owner), TTL: left(us)})
		lock.Queue = true
		return nil
	}, key)
	if err != nil {
		return nil, err
	}
	if len(lock.Holders)+len(lock.Waiters) > 0 {
		out = append(out, lock)
	}

	prim := dldriver.KeyState{Key: key}
	err = d.query(ctx, HoldersTable(t), `SELECT owner, kind, lim, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM %s WHERE lock_key = ? AND (owner = ? OR expires_at > UTC_TIMESTAMP(6))`, func(r *sql.Rows) error {
		var row primRow
		if err := r.Scan(&row.owner, &row.kind, &row.lim, &row.token, &row.remaining); err != nil {
			return err
		}
		if string(row.owner) == string(settingsOwner) {
			prim.Kind, prim.Limit = dldriver.KindSemaphore, row.lim
			if row.kind == kindRW {
				prim.Kind, prim.Limit = dldriver.KindRWLock, 0
			}
			return nil
		}
		if row.kind == writerPlace { // a waiting writer, not a holder
			prim.Waiters = append(prim.Waiters, dldriver.Entry{Owner: hex.EncodeToString(row.owner), TTL: left(row.remaining)})
			return nil
		}
		prim.Holders = append(prim.Holders, dldriver.Entry{Owner: hex.EncodeToString(row.owner), Token: row.token,
			TTL: left(row.remaining), Shared: row.kind == modeShared})
		return nil
	}, key, settingsOwner)
	if err != nil {
		return nil, err
	}
	if len(prim.Holders)+len(prim.Waiters) > 0 {
		out = append(out, prim)
	}

	err = d.query(ctx, d.electionTable(), `SELECT term, owner, value, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)
FROM %s WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY term DESC LIMIT 1`, func(r *sql.Rows) error {
		var owner []byte
		var e dldriver.Entry
		var us int64
		if err := r.Scan(&e.Token, &owner, &e.Value, &us); err != nil {
			return err
		}
		e.Owner, e.TTL = hex.EncodeToString(owner), left(us)
		out = append(out, dldriver.KeyState{Key: key, Kind: dldriver.KindElection, Holders: []dldriver.Entry{e}})
		return nil
	}, key)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func mustHex(s string) []byte { b, _ := hex.DecodeString(s); return b }

// List reads the names under prefix that something holds or waits for in any of
// the tables, and describes each.
func (d *tableDriver) List(ctx context.Context, prefix string) ([]dldriver.KeyState, error) {
	t := d.cfg.table
	names := map[string]bool{}
	for _, q := range []struct{ table, sql string }{
		{t, `SELECT lock_key FROM %s WHERE LEFT(lock_key, ?) = ? AND expires_at > UTC_TIMESTAMP(6)`},
		{t + QueueSuffix, `SELECT DISTINCT lock_key FROM %s WHERE LEFT(lock_key, ?) = ? AND deadline > UTC_TIMESTAMP(6)`},
		{HoldersTable(t), `SELECT DISTINCT lock_key FROM %s WHERE LEFT(lock_key, ?) = ? AND expires_at > UTC_TIMESTAMP(6)`},
		{d.electionTable(), `SELECT DISTINCT name FROM %s WHERE LEFT(name, ?) = ? AND expires_at > UTC_TIMESTAMP(6)`},
	} {
		err := d.query(ctx, q.table, q.sql, func(r *sql.Rows) error {
			var k []byte
			if err := r.Scan(&k); err != nil {
				return err
			}
			names[string(k)] = true
			return nil
		}, len(prefix), []byte(prefix))
		if err != nil {
			return nil, err
		}
	}
	return generic.DescribeAll(ctx, names, d.Describe)
}

// process is a connection as the server's process list shows it.
type process struct {
	user, host string
}

// processes reads the process list's user and client address of the connections
// ids; a connection the user may not see (no PROCESS privilege) is missing.
func (d *getLockDriver) processes(ctx context.Context, ids []int64) (map[int64]process, error) {
	out := map[int64]process{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := d.db.QueryContext(ctx, "SELECT ID, USER, HOST FROM information_schema.PROCESSLIST WHERE ID IN (?"+strings.Repeat(", ?", len(ids)-1)+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var p process
		if err := rows.Scan(&id, &p.user, &p.host); err != nil {
			return nil, err
		}
		out[id] = p
	}
	return out, rows.Err()
}

// connEntry is the entry of connection id as the process list shows it.
func connEntry(id int64, procs map[int64]process) dldriver.Entry {
	e := dldriver.Entry{Owner: "connection " + strconv.FormatInt(id, 10)}
	if p, ok := procs[id]; ok {
		e.Owner += " (" + p.user + ")"
		e.Address = p.host
	}
	return e
}

func (d *getLockDriver) Describe(ctx context.Context, key string) ([]dldriver.KeyState, error) {
	// The lock's holder and the semaphore's slots, in one statement.
	names := append([]string{key}, generic.SlotKeys(key)...)
	cols := make([]string, len(names))
	for i, n := range names {
		cols[i] = "IS_USED_LOCK('" + GetLockName(n) + "')" // GetLockName's names are safe literals
	}
	ids := make([]sql.NullInt64, len(names))
	dst := make([]any, len(ids))
	for i := range ids {
		dst[i] = &ids[i]
	}
	if err := d.db.QueryRowContext(ctx, "SELECT "+strings.Join(cols, ", ")).Scan(dst...); err != nil {
		return nil, err
	}
	name := GetLockName(key)
	waiting, err := d.waiting(ctx, name)
	if err != nil {
		return nil, err
	}
	var held []int64
	for _, id := range ids {
		if id.Valid {
			held = append(held, id.Int64)
		}
	}
	procs, err := d.processes(ctx, append(held, waiting...))
	if err != nil {
		return nil, err
	}
	var out []dldriver.KeyState
	lock := dldriver.KeyState{Key: key, Kind: dldriver.KindLock, Queue: true}
	if ids[0].Valid {
		lock.Holders = []dldriver.Entry{connEntry(ids[0].Int64, procs)}
	}
	for _, id := range waiting {
		lock.Waiters = append(lock.Waiters, connEntry(id, procs))
	}
	if len(lock.Holders)+len(lock.Waiters) > 0 {
		out = append(out, lock)
	}
	if st, ok := generic.SemaphoreOf(key, func(i int) (dldriver.Entry, bool) {
		id := ids[i+1]
		return connEntry(id.Int64, procs), id.Valid
	}); ok {
		out = append(out, st)
	}
	return out, nil
}

// waiting returns the connections waiting in GET_LOCK for name, the longest waiting
// first (the server's queue as far as its process list tells).
func (d *getLockDriver) waiting(ctx context.Context, name string) ([]int64, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'User lock' AND INFO LIKE ? ORDER BY TIME DESC, ID",
		"%GET_LOCK('"+name+"'%")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// lockLists are the server tables that list named locks: MariaDB's
// METADATA_LOCK_INFO (a plugin) and performance_schema (MySQL's default; on MariaDB
// only when the server runs with it: its table is there, empty, when it does not).
var lockLists = []string{
	"SELECT TABLE_SCHEMA FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'",
	"SELECT OBJECT_NAME FROM performance_schema.metadata_locks WHERE OBJECT_TYPE = 'USER LEVEL LOCK' AND LOCK_STATUS = 'GRANTED'",
}

// errNoLockList: the server offers no list of named locks.
var errNoLockList = errors.New("the server lists no named locks: install MariaDB's METADATA_LOCK_INFO plugin (INSTALL SONAME 'metadata_lock_info') or, on MySQL, enable performance_schema")

// List reads the server's list of named locks, keeps dlock's under prefix, and
// describes each. A name hashed by GetLockName (a long key, one with other
// characters, a generic semaphore's slot) does not give its key back: it is listed
// (with an empty prefix only) under its GET_LOCK name, with a note.
func (d *getLockDriver) List(ctx context.Context, prefix string) ([]dldriver.KeyState, error) {
	var lockNames []string
	var errs []error
	listed := false
	var ps bool
	if err := d.db.QueryRowContext(ctx, "SELECT @@performance_schema").Scan(&ps); err != nil {
		return nil, err
	}
	for i, q := range lockLists {
		if i == 1 && !ps {
			break
		}
		rows, err := d.db.QueryContext(ctx, q)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return nil, err
			}
			lockNames = append(lockNames, n)
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		listed = true
		break
	}
	if !listed {
		return nil, fmt.Errorf("%w (%w): %w", errNoLockList, errors.Join(errs...), errors.ErrUnsupported)
	}
	names := map[string]bool{}
	var hashed []dldriver.KeyState
	for _, n := range lockNames {
		switch name := n; {
		case strings.HasPrefix(name, readablePrefix):
			if k := name[len(readablePrefix):]; strings.HasPrefix(k, prefix) {
				names[k] = true
			}
		case strings.HasPrefix(name, hashedPrefix) && prefix == "":
			hashed = append(hashed, dldriver.KeyState{Key: name, Kind: dldriver.KindLock,
				Note: "a hashed GET_LOCK name (GetLockName): its key cannot be read back"})
		}
	}
	out, err := generic.DescribeAll(ctx, names, d.Describe)
	return append(out, hashed...), err
}
