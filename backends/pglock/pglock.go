// Package pglock keeps locks in PostgreSQL, in two ways, on a pgx connection pool
// (github.com/jackc/pgx/v5/pgxpool).
//
// New keeps them in a table, one row per key (the lease table):
//
//  1. Acquire is one statement: INSERT … ON CONFLICT DO UPDATE that inserts the
//     key's row, or takes over a row whose expiry has passed by the database
//     server's clock (statement_timestamp()), setting a random 128-bit owner, the
//     key's token plus one and the new expiry; it returns the token, or the
//     holder's remaining time when the row is held.
//  2. Refresh and Release are one statement each, checked against the owner:
//     UPDATE … WHERE lock_key = $1 AND owner = $2 AND expires_at > now. Release
//     sets the expiry to -infinity and keeps the row (its token keeps counting), and
//     in the same statement sends a notification (pg_notify) on the table's
//     channel.
//  3. Waiters queue in a second table (QueueTable); the ten nearest the head
//     listen (LISTEN, one connection per Locker, on the channel while it has
//     listening waiters), those further back look again at the pace the queue
//     moves, or listen too while it moves slowly; a release wakes the first live
//     waiter alone, which also looks again when the holder's time is up; every
//     waiter looks again at each renewal of its place.
//  4. In the default mode a caller may take a free lock ahead of waiters that
//     queued less than 2ms ago (the barging window, by the database's clock), not
//     ahead of one that has waited longer; with WithFIFO the lock goes to the first
//     live waiter only.
//
// Client clocks never matter: every expiry is written and compared by the
// database. Tokens count up per key in the key's row, so they survive a restart.
//
// NewAdvisory takes PostgreSQL's session advisory locks instead
// (pg_try_advisory_lock, pg_advisory_lock, pg_advisory_unlock and their _shared
// forms for read-write locks), each lease on a connection of its own that it keeps
// until Release: a lease lasts as long as that connection's session. Keys are
// mapped to the 64-bit lock space by a hash, and a small table (the key
// registry) makes a collision of two keys visible instead of silent: see
// AdvisoryID. A lease watches its connection and ends (ErrLost) the moment the
// server ends the session — a killed connection, pg_terminate_backend, a server
// restart, idle_session_timeout. A connection pooler that does not pin a client
// to one server session (PgBouncer in transaction or statement mode) breaks
// session locks; NewAdvisory refuses one (ErrPooler).
//
// The schemes postgres://, postgresql:// (the table) and postgres+advisory://
// open either with dlock.Open; see docs/backends/postgres.md.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// DefaultTable is the lock table New uses without WithTable.
const DefaultTable = "dlock_locks"

// DefaultRegistry is the key registry NewAdvisory uses without WithRegistry.
const DefaultRegistry = "dlock_advisory_keys"

// MinTTL is the shortest TTL New accepts: shorter leases would end before a round
// trip to the database does.
const MinTTL = 10 * time.Millisecond

// maxIdent is the longest identifier PostgreSQL keeps (NAMEDATALEN - 1 bytes).
const maxIdent = 63

// ErrPooler is returned (wrapped) by NewAdvisory's Lockers, and by
// postgres+advisory:// URLs, when a connection pooler that moves a client between
// server sessions (PgBouncer in transaction or statement mode) answers for the
// server: a session advisory lock would be taken by one server session and stay
// with it, while the pooler hands that session to other clients.
var ErrPooler = errors.New("pglock: a connection pooler that does not pin sessions (transaction pooling) is in front of the server")

// Option configures New, NewAdvisory and Migrate. WithTable, WithFIFO and
// WithMigrate apply to New and Migrate; WithRegistry to NewAdvisory (and
// Migrate); WithCheckInterval and WithMaxConns to NewAdvisory. An option given to
// a constructor it does not apply to is ignored.
type Option func(*options)

type options struct {
	table    string
	registry string
	fifo     bool
	migrate  bool
	check    time.Duration
	maxConns int
	ownPool  bool         // Close closes the pool (URL opener)
	dials    *dialTracker // the pool's connections, cut by Close (URL opener)
	// pooler, when set, is what the URL opener found in front of the server: the
	// Locker does not look again.
	pooler *poolerInfo
}

// WithTable makes New and Migrate use the table name instead of DefaultTable: one
// identifier (quoted, so any character but NUL; at most MaxTableLen bytes, so that
// name+"_queue", name+"_holders", name+"_owners" and name+"_elections" fit), in
// the schema the connection's search_path names first. Its name is also the LISTEN
// channel.
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithRegistry makes NewAdvisory (and Migrate) keep the key registry in the table
// name instead of DefaultRegistry (see AdvisoryID).
func WithRegistry(name string) Option { return func(o *options) { o.registry = name } }

// WithFIFO turns the fair mode of New on or off. In both modes waiting Acquires
// queue in a second table (the lock table's name + QueueSuffix, created by
// Migrate) and a release wakes the first live waiter alone (pg_notify). Each waiter
// renews its place every third of its TTL; a waiter that stops (a crashed process)
// no longer counts once its deadline passes by the database's clock. In the fair
// mode the lock is granted in arrival order: a TryAcquire fails while anyone
// waits, and a holder that releases and asks again queues behind the waiters. In
// the default mode a caller (a TryAcquire, or a queued waiter) may take a free lock
// ahead of waiters that queued less than 2ms ago — a holder that releases and asks
// again keeps going without a hand-off while the others are only just queueing —
// but not ahead of one that has waited longer: barging is bounded, order is not
// promised.
//
// Cost uncontended: the same one statement per acquire and per release in both
// modes; both also look the key up in the queue table's index. Clients in either
// mode exclude each other on a key, but only the fair mode's clients keep the
// order.
//
// The default mode queues only on a database whose queue table has its since
// column (Migrate makes it, and adds it to a queue table an older Migrate made for
// the fair mode) and where the user may read and write the queue table and use its
// sequence. Elsewhere (Migrate not run again since an older dlock, or a user granted
// only the lock table) the default mode runs as it did before: no queue, every
// waiter listens for the key's releases and tries again at each. A Locker looks
// once, at its first lock.
//
// In both modes a waiter that crashed keeps its place until its deadline (its
// TTL): a lock freed meanwhile waits for it, and the waiters behind it are served
// once its place has lapsed.
func WithFIFO(on bool) Option { return func(o *options) { o.fifo = on } }

// WithMigrate makes New (or NewAdvisory) create its tables (as Migrate does) before
// its first lock, if they do not exist. Without it, they must have been created with
// Migrate; a missing table makes every attempt fail with the database's error.
func WithMigrate() Option { return func(o *options) { o.migrate = true } }

// DefaultCheckInterval is how often an advisory lease pings its connection without
// WithCheckInterval.
const DefaultCheckInterval = time.Second

// WithCheckInterval sets how often an advisory lease pings its connection to find
// out that it died where the socket says nothing (a cut network); default
// DefaultCheckInterval, cut to a third of the session's idle_session_timeout.
// d <= 0 keeps the default.
func WithCheckInterval(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.check = d
		}
	}
}

// DefaultMaxConns is how many connections an advisory Locker keeps at most without
// WithMaxConns: each held or waiting lease keeps one (PostgreSQL's own
// max_connections default is 100, for every client of the server).
const DefaultMaxConns = 100

// WithMaxConns sets the most connections an advisory Locker keeps at once (default
// DefaultMaxConns): one per held lease and one per waiting Acquire. An acquire that
// would need one more fails at once with an error wrapping dlock.ErrUnavailable that
// names the limit. The pool's own MaxConns must be at least as large. n <= 0 keeps
// the default.
func WithMaxConns(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxConns = n
		}
	}
}

func newOptions(opts []Option) (options, error) {
	o := options{table: DefaultTable, registry: DefaultRegistry, check: DefaultCheckInterval, maxConns: DefaultMaxConns}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := checkIdent("table", o.table, MaxTableLen); err != nil {
		return o, err
	}
	if err := checkIdent("registry", o.registry, maxIdent); err != nil {
		return o, err
	}
	return o, nil
}

// MaxTableLen is the longest table name WithTable takes, in bytes: PostgreSQL keeps
// identifiers of 63 bytes, and the longest suffix the table's companions add
// (_elections) takes 10 of them.
const MaxTableLen = maxIdent - len(electionsSuffix)

// checkIdent checks the name of a table (what says which: "table", "registry"):
// 1 to most bytes, no NUL.
func checkIdent(what, name string, most int) error {
	if name == "" || len(name) > most {
		return fmt.Errorf("pglock: %s name %q of %d bytes: want 1 to %d bytes", what, name, len(name), most)
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("pglock: %s name %q holds a NUL", what, name)
		}
	}
	return nil
}

// New returns a Locker whose locks are rows of a table in the database pool
// connects to (DefaultTable, or the one given with WithTable), created by Migrate
// or, with WithMigrate, on first use. Close does not close pool.
//
// Acquire inserts the key's row, or takes over a row that is free or expired by the
// database server's clock, in one statement; Release and Refresh are one statement
// each and check the owner. Tokens count up per key in the key's row, so they
// survive server restarts; rows are never deleted (deleting one by hand restarts its
// key's tokens at 1). Waiters queue (see WithFIFO for the two modes' order) and
// wake on the release's notification, which names the first waiter (LISTEN on a
// connection of the Locker's own, made from pool's configuration, on the channel
// while the Locker has listening waiters, and kept 5 seconds after the last),
// else when the holder's time is up or at the renewal of their place; waiters
// further back than the tenth look again at the pace the queue moves (at most
// 256ms apart), and listen as the near ones do once it has stood still for 50ms,
// until it moves fast again; behind a transaction-pooling
// PgBouncer, which cannot carry LISTEN, they poll (the Locker finds the pooler at
// its first lock). An Acquire with dlock.WithRetry does not queue: it retries
// TryAcquire by its strategy.
//
// Not guaranteed either: PostgreSQL (15) signals every session of the database
// that listens on each notification, and each reads it in a transaction of its
// own, so a hand-off costs the server a transaction per Locker that listens at
// that moment (its waiters near the head, and while the queue moves slowly those
// further back), however few of them it wakes, and the waiters further back a few
// looks each while they move up (docs/backends/postgres.md).
//
// Not guaranteed: expiry follows the database server's clock, so a step of that
// clock moves every expiry. A replica promoted after a failover may lack the latest
// rows with asynchronous replication, and may then grant a held lock again or
// repeat a token (synchronous replication keeps them: docs/backends/postgres.md).
//
// New panics on an invalid table name (a programming error).
func New(pool *pgxpool.Pool, opts ...Option) dlock.Locker {
	o, err := newOptions(opts)
	if err != nil {
		panic(err)
	}
	return newTable(pool, o)
}

// NewAdvisory returns a Locker that takes session advisory locks through pool: a
// lease keeps a connection of the pool to itself (its session holds the lock) until
// Release, which unlocks and gives the connection back. There is no per-lease TTL
// (WithTTL is accepted and ignored), Refresh returns errors.ErrUnsupported, and
// Token is always 0. Keys map to lock ids as AdvisoryID says, through the key
// registry (WithRegistry; created by Migrate, or on first use with WithMigrate).
// Close does not close pool.
//
// Acquire waits in pg_advisory_lock on the server, which queues a key's waiters:
// a client that releases and asks again queues behind them, and a waiting
// exclusive request keeps new shared ones out (read-write locks). Cancelling ctx
// (or closing the Locker) cancels the wait on the server and, if the lock was
// granted meanwhile, unlocks it before Acquire returns.
//
// Loss: the server frees a session's locks the moment the session ends. A lease
// watches its connection between its statements and ends (Done, ErrLost) as soon as
// the server closes it (pg_terminate_backend, a shutdown, the server's process
// dying), and pings it every check interval (WithCheckInterval) for the losses no
// socket shows (a cut network): when a ping fails, or goes unanswered until an
// interval before the server may free the lock (idle_session_timeout after the last
// answered ping; 10 s without idle_session_timeout), the connection is dropped and
// the lease ends. A slow answer on a busy machine is not taken for a loss. A client that vanished
// keeps its locks until the server ends its session: at once for a closed
// connection, after idle_session_timeout (set it on the pool's connections; the
// URL's session_timeout does) for a silent one, else when TCP keepalives give up
// (hours by default).
//
// The first lock looks for a connection pooler in front of the server; one that
// moves clients between server sessions (PgBouncer in transaction or statement
// mode) makes every attempt fail with ErrPooler. Not guaranteed: a holder paused
// for longer than idle_session_timeout loses the lock without knowing until it runs
// again, and no token protects a resource from it.
func NewAdvisory(pool *pgxpool.Pool, opts ...Option) dlock.Locker {
	o, err := newOptions(opts)
	if err != nil {
		panic(err)
	}
	return newAdvisory(pool, o)
}

// Migrate creates in the database pool connects to, if they do not exist: the lock
// table (DefaultTable, or WithTable's), beside it the table of the semaphores and
// read-write locks (HoldersTable), that of the elections (ElectionsTable), that of
// the locks' holder records (OwnersTable), the waiters' queue table (QueueTable,
// both modes); and the advisory mode's key registry (DefaultRegistry, or
// WithRegistry's). It is idempotent and safe to run from many processes at once.
// It returns the database's error, wrapped, if a table cannot be created (no
// CREATE privilege on the schema). It alters one existing table only: a queue table
// an older Migrate made without the since column gets it, so that the default mode
// can queue (see WithFIFO). That ALTER TABLE needs the table's ownership and its
// exclusive lock, which it waits for at most 2 seconds (every statement on the
// queue waits behind it meanwhile); without either it leaves the table as it is,
// and returns no error. It checks no other table.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	o, err := newOptions(opts)
	if err != nil {
		return err
	}
	if err := migrate(ctx, pool, o); err != nil {
		return fmt.Errorf("pglock: %w", err)
	}
	return nil
}

// migrate creates every table of o; its errors are unprefixed (a Locker's
// WithMigrate reports them through the core, which names the backend).
func migrate(ctx context.Context, pool *pgxpool.Pool, o options) error {
	stmts := []string{
		fmt.Sprintf(createTable, quoteIdent(o.table)),
		fmt.Sprintf(createHolders, quoteIdent(HoldersTable(o.table))),
		fmt.Sprintf(createElections, quoteIdent(ElectionsTable(o.table))),
		fmt.Sprintf(createOwners, quoteIdent(OwnersTable(o.table))),
		fmt.Sprintf(createRegistry, quoteIdent(o.registry)),
	}
	q := QueueTable(o.table)
	stmts = append(stmts, fmt.Sprintf(createQueue, quoteIdent(q), quoteIdent(q+"_key")))
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil && !isDuplicateObject(err) {
			return fmt.Errorf("create table: %w", err)
		}
	}
	// A queue table an older Migrate made (for the fair mode) lacks since; the
	// ALTER runs only then (it locks the table out for its duration).
	var has bool
	if err := pool.QueryRow(ctx, hasSinceSQL, quoteIdent(q)).Scan(&has); err != nil {
		return fmt.Errorf("look for the queue table: %w", err)
	}
	if !has {
		if err := addSinceColumn(ctx, pool, q); err != nil {
			return fmt.Errorf("alter table: %w", err)
		}
	}
	return nil
}

// sinceLockTimeout bounds how long Migrate's ALTER of an older queue table waits for
// the table's lock: meanwhile every lock's statements on the key's queue wait
// behind it.
const sinceLockTimeout = 2 * time.Second

// addSinceColumn adds the since column to the queue table q (addSince), waiting at
// most sinceLockTimeout for the table's lock. A lock not had in time
// (lock_not_available) or a user that does not own the table
// (insufficient_privilege) leaves the column missing without an error: the fair
// mode does not need it, and the default mode runs without a queue (oldDefault)
// until a Migrate adds it.
func addSinceColumn(ctx context.Context, pool *pgxpool.Pool, q string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit: nothing to do
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", sinceLockTimeout.Milliseconds())); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(addSince, quoteIdent(q))); err != nil {
		var pe *pgconn.PgError
		if isDuplicateObject(err) || errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "55P03") {
			return nil
		}
		return err
	}
	return tx.Commit(ctx)
}

// info is the shared Locker's description of each mode.
var (
	tableInfo    = driver.Info{Name: "postgres", MinTTL: MinTTL}
	advisoryInfo = driver.Info{Name: "postgres+advisory", SessionTTL: true}
)
