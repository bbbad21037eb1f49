// Package sqlfence is a fencing guard (package fence) for a SQL database: the
// fences live in a table, one row per resource, and the guarded write is the
// caller's own transaction.
//
// Tx runs, in the caller's transaction, one guarded statement on the resource's
// fence row and reads the row back:
//
//	MySQL, MariaDB:
//	INSERT INTO dlock_fence (resource, token, writer) VALUES (?, ?, ?)
//	ON DUPLICATE KEY UPDATE writer = IF(VALUES(token) > token, VALUES(writer), writer),
//	                        token  = GREATEST(token, VALUES(token))
//	PostgreSQL:
//	INSERT INTO dlock_fence (resource, token, writer) VALUES ($1, $2, $3)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, writer = EXCLUDED.writer
//	WHERE dlock_fence.token < EXCLUDED.token
//
//	SELECT token, writer FROM dlock_fence WHERE resource = ? FOR UPDATE
//
// The statement moves the fence only for a larger token; the write is accepted when
// the row then holds the caller's token and writer (a larger token, or the same
// grant again), and refused otherwise (a smaller token, or an equal one from another
// writer). The statement locks the row until the transaction ends, so a newer
// grant's guard waits for the caller's commit or rollback: the caller's writes in
// the same transaction land, with the fence, before any newer grant is decided —
// or, rolled back, not at all, the fence with them.
//
// Not guaranteed: writes made outside the guarded transaction; a transaction that
// guards two resources in different orders than another can deadlock (the database
// picks a victim and returns its error); a holder paused inside its guarded
// transaction keeps the row locked, and newer grants wait until the database ends
// that transaction (a lock wait timeout, the connection's end); a replica promoted
// after an asynchronous failover may not have the latest fences, and then accepts
// a stale token once more.
package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"regexp"

	"github.com/dlock-go/dlock/fence"
)

// Dialect is the SQL the guard speaks.
type Dialect int

// The dialects.
const (
	// MySQL: MySQL 5.7 and later, MariaDB 10.3 and later (InnoDB), through
	// github.com/go-sql-driver/mysql or any driver that takes ? placeholders.
	MySQL Dialect = iota + 1
	// PostgreSQL: PostgreSQL 9.5 and later (ON CONFLICT), through any driver that
	// takes $n placeholders (pgx's stdlib, lib/pq).
	PostgreSQL
)

// String names the dialect.
func (d Dialect) String() string {
	switch d {
	case MySQL:
		return "MySQL"
	case PostgreSQL:
		return "PostgreSQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the fence table's name unless WithTable says otherwise.
const DefaultTable = "dlock_fence"

// Guard is a fence.Guard whose fences are rows of a table. Safe for concurrent use.
type Guard struct {
	db      *sql.DB
	dialect Dialect
	table   string
	upsert  string
	read    string
}

// Option configures New.
type Option func(*Guard)

// WithTable names the fence table (letters, digits and underscores, optionally
// schema-qualified: "app.fences"); DefaultTable by default.
func WithTable(name string) Option { return func(g *Guard) { g.table = name } }

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// New returns the guard of the fence table in db, in dialect d. It does not touch
// the database: CreateTable creates the table. An unknown dialect or a table name
// other than letters, digits and underscores is fence.ErrInvalid.
func New(db *sql.DB, d Dialect, opts ...Option) (*Guard, error) {
	g := &Guard{db: db, dialect: d, table: DefaultTable}
	for _, o := range opts {
		o(g)
	}
	if !tableName.MatchString(g.table) {
		return nil, fmt.Errorf("%w: table name %q: want letters, digits and underscores", fence.ErrInvalid, g.table)
	}
	switch d {
	case MySQL:
		g.upsert = "INSERT INTO " + g.table + " (resource, token, writer) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE " +
			"writer = IF(VALUES(token) > token, VALUES(writer), writer), token = GREATEST(token, VALUES(token))"
		g.read = "SELECT token, writer FROM " + g.table + " WHERE resource = ? FOR UPDATE"
	case PostgreSQL:
		g.upsert = "INSERT INTO " + g.table + " AS f (resource, token, writer) VALUES ($1, $2, $3) ON CONFLICT (resource) DO UPDATE " +
			"SET token = EXCLUDED.token, writer = EXCLUDED.writer WHERE f.token < EXCLUDED.token"
		g.read = "SELECT token, writer FROM " + g.table + " WHERE resource = $1 FOR UPDATE"
	default:
		return nil, fmt.Errorf("%w: %v", fence.ErrInvalid, d)
	}
	return g, nil
}

// CreateTable creates the fence table if it does not exist: resource (the primary
// key, up to fence.MaxLen bytes, compared byte for byte), token (BIGINT) and writer.
func (g *Guard) CreateTable(ctx context.Context) error {
	ddl := "CREATE TABLE IF NOT EXISTS " + g.table + " (resource VARBINARY(255) NOT NULL PRIMARY KEY, " +
		"token BIGINT NOT NULL, writer VARBINARY(255) NOT NULL) ENGINE=InnoDB"
	if g.dialect == PostgreSQL {
		ddl = "CREATE TABLE IF NOT EXISTS " + g.table + " (resource TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, " +
			"token BIGINT NOT NULL, writer TEXT COLLATE \"C\" NOT NULL)"
	}
	if _, err := g.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("sqlfence: creating %s: %w", g.table, err)
	}
	return nil
}

// Check applies the rule in a transaction of its own (see fence.Guard): the fence
// moves when the token is accepted, and nothing else is written.
func (g *Guard) Check(ctx context.Context, resource string, token uint64, writer string) error {
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlfence: %w", err)
	}
	if err := g.Tx(ctx, tx, resource, token, writer); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlfence: commit: %w", err)
	}
	return nil
}

// Tx is the guarded write: it applies the rule to token and writer for resource in
// the caller's transaction tx, and returns nil when the caller may write (and then
// commit), or the refusal (fence.ErrStale; the caller rolls back). Run it first in
// the transaction. Tokens above math.MaxInt64 (a BIGINT) are fence.ErrInvalid; a
// database error (a deadlock, a lock wait timeout) comes back wrapped, and the
// caller rolls back.
func (g *Guard) Tx(ctx context.Context, tx *sql.Tx, resource string, token uint64, writer string) error {
	if err := fence.Validate(resource, token, writer); err != nil {
		return err
	}
	if token > math.MaxInt64 {
		return fmt.Errorf("%w: token %d of %q does not fit a BIGINT", fence.ErrInvalid, token, resource)
	}
	if _, err := tx.ExecContext(ctx, g.upsert, resource, int64(token), writer); err != nil {
		return fmt.Errorf("sqlfence: the guarded statement on %q: %w", resource, err)
	}
	var cur fence.State
	var tok int64
	if err := tx.QueryRowContext(ctx, g.read, resource).Scan(&tok, &cur.Writer); err != nil {
		return fmt.Errorf("sqlfence: reading the fence of %q: %w", resource, err)
	}
	if tok <= 0 {
		return fmt.Errorf("%w: the fence row of %q holds %d, not a token (is %s written by another program?)", fence.ErrInvalid, resource, tok, g.table)
	}
	cur.Token = uint64(tok)
	if cur == (fence.State{Token: token, Writer: writer}) {
		return nil
	}
	if _, err := cur.Admit(resource, token, writer); err != nil {
		return err
	}
	// The statement takes any token the rule accepts: a row that did not is not
	// this guard's (a trigger, another program writing the table).
	return fmt.Errorf("sqlfence: the fence row of %q holds token %d after the guarded statement for token %d: refused (is %s written by another program?)",
		resource, cur.Token, token, g.table)
}
