// Package mysqllock keeps locks in MySQL or MariaDB, in two ways.
//
// New keeps them in a table with the lock key as primary key (the unique-index lock):
// one row per key holding the owner, a fencing token and the expiry. Expiry is judged
// by the database server's clock alone (UTC_TIMESTAMP(6), the statement's start time
// on the server), never by a client's clock or session time zone. Acquire, Refresh and
// Release are one statement, one round trip each.
//
// NewGetLock uses the server's named locks (GET_LOCK / RELEASE_LOCK) instead: each
// lease holds one dedicated connection, and lasts as long as that connection's
// session. It has no per-lease TTL, no Refresh and no fencing token.
//
// The schemes "mysql://user:pass@host:port/db" and "mysql+getlock://…" open either
// kind with dlock.Open; see docs/backends/mysql.md for the trade-offs.
package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// DefaultTable is the table New uses without WithTable.
const DefaultTable = "dlock_locks"

// MinTTL is the shortest TTL New accepts: shorter leases would end before a network
// round trip to the database does.
const MinTTL = 10 * time.Millisecond

// Option configures New, Migrate and NewGetLock: WithTable, WithFIFO and WithMigrate
// apply to New and Migrate (the table Locker), WithMaxConns and WithCheckInterval to
// NewGetLock; an option given to a constructor it does not apply to is ignored.
type Option func(*options)

// options are both Lockers' settings, one Option type for the package.
type options struct {
	config
	getLockConfig
}

type config struct {
	table   string
	fifo    bool
	migrate bool
	ownDB   bool // Close closes db (URL opener)
}

// WithTable makes New and Migrate use the table name instead of DefaultTable. The name
// is one identifier in the database the *sql.DB connects to (it is quoted, so any
// character MySQL allows in a quoted identifier may be in it: valid UTF-8 in the
// Basic Multilingual Plane, no NUL, not ending in a space) of at most MaxTableLen
// characters, so that its companion tables' names (HoldersTable, ElectionsTable,
// the queue table) fit MySQL's 64.
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithFIFO turns the fair mode on or off. In the fair mode waiting Acquires queue at
// once in a second table (the lock table's name + QueueSuffix, created by Migrate;
// the default mode queues there the Acquires that have waited 2ms) and are granted the lock in arrival order: a TryAcquire fails while
// anyone waits, and a holder that releases and asks again queues behind the
// waiters. Each waiter renews its row's deadline every third of its TTL; a waiter
// that stops (a crashed process) no longer counts once its deadline passes by the
// database's clock. Waiters still poll (the database announces nothing): the first
// one often, the others the less often the further back they are, so that the
// statements per hand-off do not grow with the queue.
//
// Cost uncontended: the same one statement per acquire and per release; the acquire
// also looks the key up in the queue table's index. Clients in either mode exclude
// each other on a key (TestMixedModesExclude), but only the fair mode's clients keep
// the order.
func WithFIFO(on bool) Option { return func(o *options) { o.fifo = on } }

// WithMigrate makes the Locker create its table (as Migrate does) before its first
// lock, if the table does not exist yet. Without it, the table must have been created
// with Migrate; a missing table makes every attempt fail with the database's error.
func WithMigrate() Option { return func(o *options) { o.migrate = true } }

// apply applies opts to o.
func (o *options) apply(opts []Option) {
	for _, opt := range opts {
		if opt != nil {
			opt(o)
		}
	}
}

func newConfig(opts []Option) (config, error) {
	o := options{config: config{table: DefaultTable}}
	o.apply(opts)
	c := o.config
	if err := validateTable(c.table); err != nil {
		return c, fmt.Errorf("mysqllock: %w", err)
	}
	return c, nil
}

// MaxTableLen is the longest lock table name, in characters: MySQL's 64 less the
// longest suffix of its companion tables (ElectionsTable's "_elections").
const MaxTableLen = 64 - len("_elections")

// validateTable checks a lock table's name as MySQL checks a quoted identifier,
// with room for its companions' suffixes.
func validateTable(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case n == 0 || n > MaxTableLen:
		return fmt.Errorf("table name %q: want 1 to %d characters (%q, %q and %q must fit 64), not %d",
			name, MaxTableLen, HoldersTable(name), ElectionsTable(name), name+QueueSuffix, n)
	case !utf8.ValidString(name):
		return fmt.Errorf("table name %q is not valid UTF-8", name)
	case strings.HasSuffix(name, " "):
		return fmt.Errorf("table name %q ends in a space, which MySQL does not allow", name)
	}
	for _, r := range name {
		if r == 0 || r > 0xFFFF {
			return fmt.Errorf("table name %q contains %U, which MySQL does not allow in an identifier", name, r)
		}
	}
	return nil
}

// New returns a Locker whose locks are rows of a table in db (DefaultTable, or the
// one given with WithTable), created by Migrate or, with WithMigrate, on first use.
//
// Acquire inserts the key's row, or takes over a row that is free or expired by the
// database server's clock, in one statement (two when this client's note that the key
// was free has gone stale); Release and Refresh are one statement each and check the
// owner. Tokens count up per key in the key's row, so they survive
// server restarts; the rows are never deleted (deleting one by hand restarts its key's
// tokens at 1).
//
// Waiters poll, each pause cut to the holder's remaining time as the server sees
// it. A key is taken by whoever asks first while it is free, except that an Acquire
// that has waited 2ms joins the fair mode's queue (the queue table, see WithFIFO)
// and claims the key in its row at each look: while a claim lasts only the first
// queued waiter may take the key when it frees, and it gets it at its next look; a
// grant keeps the claim while others are queued. So a client that releases and
// asks again at once waits 2ms, then queues behind those already queued;
// TryAcquire fails (and AcquireAll waits) on a free key while a claim lasts. A claim
// lasts 250ms past the last look of a queued waiter, and ends with the last queued
// Acquire. With WithRetry your strategy polls with TryAcquire instead, and neither
// queues nor claims. A table Migrate made before claims existed, or a database
// without the queue table, works without them (waiters only poll) until Migrate
// runs again; a Locker made before that goes on without them (it prepares its
// statements once), one made after uses them.
//
// Not guaranteed: the order of grants among Acquires that have waited less than
// 2ms (use WithFIFO for arrival order from the first wait); an Acquire whose
// process died stays first in the queue until its row's deadline (its TTL), as in
// the fair mode.
//
// Also not guaranteed: expiry follows the database server's clock, so a step of that clock
// moves every expiry (and every claim's end); a session that sets @@timestamp fakes "now" for its own
// statements. A replica promoted after a failover may not have the latest rows
// (asynchronous replication), and may then grant a lock again or repeat a token.
//
// New panics on an invalid table name (a programming error).
func New(db *sql.DB, opts ...Option) dlock.Locker {
	c, err := newConfig(opts)
	if err != nil {
		panic(err)
	}
	return newLocker(db, c)
}

func newLocker(db *sql.DB, c config) dlock.Locker {
	d := &tableDriver{db: db, cfg: c, background: generic.Background{Timeout: tidyTimeout}}
	info := driver.Info{Name: "mysql", MinTTL: MinTTL}
	if c.fifo {
		return dlock.New(fairTableDriver{d}, info)
	}
	return dlock.New(d, info)
}

// Migrate creates the lock table in db if it does not exist (DefaultTable, or the one
// given with WithTable), beside it the table of the semaphores and read-write locks
// (HoldersTable), that of the elections (ElectionsTable) and that of the locks'
// holder records (OwnersTable), and the waiters' queue table (the lock table's name +
// QueueSuffix; both modes queue there). It is idempotent
// and safe to run from many processes at once.
// It returns the database's error, wrapped, if the table cannot be created (e.g. no
// CREATE privilege). Of an existing lock table it checks one thing: a table made
// before the waiters' claim columns existed gets them (ALTER TABLE, which needs
// the ALTER privilege); it checks or alters nothing else.
func Migrate(ctx context.Context, db *sql.DB, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := migrate(ctx, db, c); err != nil {
		return fmt.Errorf("mysqllock: %w", err)
	}
	return nil
}

// migrate is Migrate with c, its errors unprefixed (a Locker's WithMigrate reports
// them through the core, which names the backend).
func migrate(ctx context.Context, db *sql.DB, c config) error {
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createTable, quoteIdent(c.table))); err != nil {
		return fmt.Errorf("create table %s: %w", quoteIdent(c.table), err)
	}
	q := quoteIdent(c.table + QueueSuffix) // both modes queue their waiters
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createQueue, q)); err != nil {
		return fmt.Errorf("create table %s: %w", q, err)
	}
	if err := migrateHolders(ctx, db, c.table); err != nil {
		return err
	}
	if err := migrateOwners(ctx, db, c.table); err != nil {
		return err
	}
	if err := migrateElections(ctx, db, c.table); err != nil {
		return err
	}
	return migrateClaims(ctx, db, c.table) // last: a Locker WithMigrate goes on without claims when it fails
}
