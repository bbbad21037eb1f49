package mysqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Sets of keys (dlock.AcquireAll) in one statement: a multi-row INSERT … ON
// DUPLICATE KEY UPDATE of the keys' rows in the lock table. A free row is taken
// over (its token goes up by one, as for a single lock); a held row makes the
// statement fail on purpose — its token is pushed past the BIGINT UNSIGNED range,
// an error in every SQL mode — and InnoDB rolls the whole statement back, so a set
// is taken whole or not at all. A second statement reads the tokens back.

var _ driver.MultiLocker = (*tableDriver)(nil)

// erOutOfRange is MySQL's ER_DATA_OUT_OF_RANGE: the set met a held key.
const erOutOfRange = 1690

// acquireAllSQL takes the rows of a set; %[1]s is the table, %[2]s the rows, one
// "(?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)" per key (key, owner,
// ttl µs), %[3]s the claim condition (as in acquireSQL: a key an Acquire has
// claimed counts as held).
const acquireAllSQL = `INSERT INTO %[1]s (lock_key, owner, token, expires_at) VALUES %[2]s
ON DUPLICATE KEY UPDATE
  token = IF(expires_at <= UTC_TIMESTAMP(6) AND %[3]s, token + 1, token + 18446744073709551615),
  owner = VALUES(owner),
  expires_at = VALUES(expires_at)`

// The set's rows, owner-checked; %s is the table, %s the placeholders of the keys.
const (
	setTokensSQL  = `SELECT lock_key, token FROM %s WHERE owner = ? AND lock_key IN (%s)`
	setRefreshSQL = `UPDATE %s SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE owner = ? AND expires_at > UTC_TIMESTAMP(6) AND lock_key IN (%s)`
	setReleaseSQL = `UPDATE %s SET expires_at = ` + freeAt + ` WHERE owner = ? AND expires_at > UTC_TIMESTAMP(6) AND lock_key IN (%s)`
	setTidySQL    = `UPDATE %s SET expires_at = ` + freeAt + ` WHERE owner = ? AND lock_key IN (%s)`
)

func placeholders(n int, one string) string {
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

func (d *tableDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	st, err := d.stmts(ctx) // the table exists (WithMigrate)
	if err != nil {
		return nil, err
	}
	claim := unclaimed
	if !st.claims {
		claim = "TRUE" // a table without claim columns
	}
	s := &tableSet{d: d, table: quoteIdent(d.cfg.table)}
	if _, err := rand.Read(s.owner[:]); err != nil {
		return nil, fmt.Errorf("owner id: %w", err)
	}
	var args []any
	for _, k := range keys {
		s.keys = append(s.keys, []byte(k))
		args = append(args, []byte(k), s.owner[:], micros(ttl))
	}
	q := fmt.Sprintf(acquireAllSQL, s.table, placeholders(len(keys), "(?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)"), claim)
	_, err = d.db.ExecContext(ctx, q, args...)
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && (me.Number == erOutOfRange || me.Number == erLockDeadlock):
		return nil, driver.Busy(0)
	case err != nil:
		if ctx.Err() != nil {
			s.tidyUp()
		}
		return nil, fmt.Errorf("acquire set: %w", err)
	}
	if err := s.readTokens(ctx); err != nil {
		s.tidyUp()
		return nil, err
	}
	return s, nil
}

// tableSet is one grant of a set: the keys' rows, all with one owner value.
type tableSet struct {
	d      *tableDriver
	table  string
	keys   [][]byte
	owner  [16]byte
	tokens []uint64
}

// keyArgs returns the owner followed by the keys, for the set's statements.
func (s *tableSet) keyArgs(first ...any) []any {
	args := append(first, s.owner[:])
	for _, k := range s.keys {
		args = append(args, k)
	}
	return args
}

func (s *tableSet) query(format string) string {
	return fmt.Sprintf(format, s.table, placeholders(len(s.keys), "?"))
}

func (s *tableSet) readTokens(ctx context.Context) error {
	rows, err := s.d.db.QueryContext(ctx, s.query(setTokensSQL), s.keyArgs()...)
	if err != nil {
		return fmt.Errorf("read the set's tokens: %w", err)
	}
	defer rows.Close()
	s.tokens = make([]uint64, len(s.keys))
	for rows.Next() {
		var k []byte
		var tok uint64
		if err := rows.Scan(&k, &tok); err != nil {
			return err
		}
		if i := slices.IndexFunc(s.keys, func(x []byte) bool { return string(x) == string(k) }); i >= 0 {
			s.tokens[i] = tok
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if slices.Contains(s.tokens, 0) {
		return fmt.Errorf("a row of the set was gone right after it was taken")
	}
	return nil
}

func (s *tableSet) Token() uint64    { return slices.Max(s.tokens) }
func (s *tableSet) Tokens() []uint64 { return slices.Clone(s.tokens) }

// all runs an owner-checked update of the set's rows and reports whether it
// changed every one; if not, the set is lost and the rows still ours are freed.
func (s *tableSet) all(ctx context.Context, format string, first ...any) error {
	ok, err := affectedAll(s.d.db.ExecContext(ctx, s.query(format), s.keyArgs(first...)...))(len(s.keys))
	switch {
	case err != nil:
		return fmt.Errorf("set: %w", err)
	case !ok:
		_, _ = s.d.db.ExecContext(ctx, s.query(setTidySQL), s.keyArgs()...)
		return dlock.ErrNotHeld
	}
	return nil
}

func (s *tableSet) Refresh(ctx context.Context, ttl time.Duration) error {
	return s.all(ctx, setRefreshSQL, micros(ttl))
}

func (s *tableSet) Unlock(ctx context.Context) error { return s.all(ctx, setReleaseSQL) }

// tidyUp frees the set's rows if ours, in the background, bounded.
func (s *tableSet) tidyUp() {
	s.d.inBackground(func(ctx context.Context) { _, _ = s.d.db.ExecContext(ctx, s.query(setTidySQL), s.keyArgs()...) })
}

// affectedAll returns whether an owner-checked statement changed n rows.
func affectedAll(res sql.Result, err error) func(n int) (bool, error) {
	return func(n int) (bool, error) {
		if err != nil {
			return false, err
		}
		m, err := res.RowsAffected()
		return m == int64(n), err
	}
}
