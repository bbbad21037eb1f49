package pglock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Sets of keys (dlock.AcquireAll) of the lease table, in one statement: a
// multi-row INSERT … ON CONFLICT DO UPDATE of the keys' rows, in the keys' sorted
// order (concurrent sets lock rows in one order). A free row is taken over (its
// token goes up by one, as for a single lock); a held row makes the statement fail
// on purpose — its new token is NULL, which the column refuses — and PostgreSQL
// rolls the whole statement back, so a set is taken whole or not at all. The same
// statement returns every key's token.

var _ driver.MultiLocker = (*tableDriver)(nil)

const (
	// acquireAllSQL takes the rows of a set. Arguments: keys, owner, ttl µs.
	acquireAllSQL = `INSERT INTO %s AS l (lock_key, owner, token, expires_at)
SELECT k, $2, 1, statement_timestamp() + $3::bigint * interval '1 microsecond' FROM unnest($1::bytea[]) WITH ORDINALITY AS u(k, i) ORDER BY i
ON CONFLICT (lock_key) DO UPDATE SET owner = EXCLUDED.owner,
  token = CASE WHEN l.expires_at <= statement_timestamp() THEN l.token + 1 END,
  expires_at = EXCLUDED.expires_at
RETURNING lock_key, token`
	// The set's rows, owner-checked. Arguments: keys, owner (, ttl µs | channel).
	setRefreshSQL = `UPDATE %s SET expires_at = statement_timestamp() + $3::bigint * interval '1 microsecond'
WHERE lock_key = ANY($1::bytea[]) AND owner = $2 AND expires_at > statement_timestamp()`
	setReleaseSQL = `UPDATE %s SET expires_at = '-infinity'
WHERE lock_key = ANY($1::bytea[]) AND owner = $2 AND expires_at > statement_timestamp()
RETURNING pg_notify($3, 'k' || encode(lock_key, 'hex'))::text`
	setTidySQL = `UPDATE %s SET expires_at = '-infinity' WHERE lock_key = ANY($1::bytea[]) AND owner = $2`
)

type multiStatements struct{ acquire, refresh, release, tidy string }

func newMultiStatements(table string) multiStatements {
	t := quoteIdent(table)
	f := func(q string) string { return fmt.Sprintf(q, t) }
	return multiStatements{f(acquireAllSQL), f(setRefreshSQL), f(setReleaseSQL), f(setTidySQL)}
}

// isHeldInSet reports the statement's failure on a held key of the set (its token
// NULL: not_null_violation).
func isHeldInSet(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23502" && pe.ColumnName == "token"
}

func (d *tableDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	s := &tableSet{d: d, owner: owner}
	for _, k := range keys {
		s.keys = append(s.keys, []byte(k))
	}
	rows, err := d.pool.Query(ctx, d.multi.acquire, s.keys, owner, micros(ttl))
	if err == nil {
		s.tokens = make([]uint64, len(keys))
		for rows.Next() {
			var k []byte
			var tok int64
			if err = rows.Scan(&k, &tok); err != nil {
				break
			}
			if i := slices.IndexFunc(s.keys, func(x []byte) bool { return string(x) == string(k) }); i >= 0 {
				s.tokens[i] = uint64(tok)
			}
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	switch {
	case isHeldInSet(err), isSerialization(err):
		return nil, driver.Busy(0)
	case err != nil:
		if ctx.Err() != nil {
			s.tidyUp()
		}
		return nil, fmt.Errorf("acquire set: %w", err)
	case slices.Contains(s.tokens, 0):
		s.tidyUp()
		return nil, errors.New("acquire set: a key's token did not come back")
	}
	return s, nil
}

// tableSet is one grant of a set: the keys' rows, all with one owner value.
type tableSet struct {
	d      *tableDriver
	keys   [][]byte
	owner  pgtype.UUID
	tokens []uint64
}

func (s *tableSet) Token() uint64    { return slices.Max(s.tokens) }
func (s *tableSet) Tokens() []uint64 { return slices.Clone(s.tokens) }

func (s *tableSet) Refresh(ctx context.Context, ttl time.Duration) error {
	tag, err := s.d.pool.Exec(ctx, s.d.multi.refresh, s.keys, s.owner, micros(ttl))
	return s.all(ctx, tag, err, "refresh")
}

func (s *tableSet) Unlock(ctx context.Context) error {
	tag, err := s.d.pool.Exec(ctx, s.d.multi.release, s.keys, s.owner, s.d.hub.channel)
	return s.all(ctx, tag, err, "release")
}

// all reads an owner-checked update of the set's rows: unless it changed every one,
// the set is lost and the rows still ours are freed.
func (s *tableSet) all(ctx context.Context, tag pgconn.CommandTag, err error, what string) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s set: %w", what, err)
	case tag.RowsAffected() != int64(len(s.keys)):
		_, _ = s.d.pool.Exec(ctx, s.d.multi.tidy, s.keys, s.owner)
		return dlock.ErrNotHeld
	}
	return nil
}

// tidyUp frees the set's rows if ours, in the background, bounded.
func (s *tableSet) tidyUp() {
	s.d.inBackground(func(ctx context.Context) { _, _ = s.d.pool.Exec(ctx, s.d.multi.tidy, s.keys, s.owner) })
}
