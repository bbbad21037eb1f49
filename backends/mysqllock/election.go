package mysqllock

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Leader election (dlock.NewElection), in a table of its own next to the lock table
// (ElectionsTable: its name with "_elections" appended, created by Migrate): one row
// per term, keyed by the election's
// name and the term's number, which is its fencing token. A campaign is one
// statement that inserts the next term only if no term of the election is live by
// the database server's clock; refresh and resignation update the term's row,
// owner-checked, as for a lock. The rows are the history of the election, so
// observers (who poll it) see every term; the oldest are pruned past keptTerms.

// keptTerms is how many terms per election the table keeps.
const keptTerms = 1000

// observePoll is how often an observer reads the terms table.
const observePoll = 50 * time.Millisecond

const createElectionTable = `CREATE TABLE IF NOT EXISTS %s (
  name       VARBINARY(255) NOT NULL,
  term       BIGINT UNSIGNED NOT NULL,
  owner      BINARY(16) NOT NULL,
  value      VARBINARY(4096) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (name, term)
) ENGINE=InnoDB`

// A campaign is two statements, neither of which locks what it reads: headSQL
// reads the last term of the election and whether it is live by the database
// server's clock (a consistent read); when it has ended (or there is none),
// campaignSQL inserts the next term. Only the last term can be live: a term is
// inserted only when the one before has ended, and an ended term never comes back
// (refresh needs a live row). Two campaigns that both find the last term ended
// insert the same term number: the primary key lets one win. (One INSERT … SELECT
// took shared next-key locks on the election's rows, and 100 candidates' inserts
// deadlocked on each other: 4025 deadlocks in 2s against 4 terms won.)
// headSQL's argument: name. campaignSQL's: name, term, owner, value, ttl µs.
const (
	headSQL     = `SELECT term, expires_at > UTC_TIMESTAMP(6) FROM %s WHERE name = ? ORDER BY term DESC LIMIT 1`
	campaignSQL = `INSERT INTO %s (name, term, owner, value, expires_at)
VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`
)

// The term's row, owner-checked. Arguments: (ttl µs,) name, term, owner.
const (
	termRefreshSQL = `UPDATE %s SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND term = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`
	termResignSQL = `UPDATE %s SET expires_at = ` + freeAt + `
WHERE name = ? AND term = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)`
	termTidySQL = `UPDATE %s SET expires_at = ` + freeAt + ` WHERE name = ? AND term = ? AND owner = ?`
	leaderSQL   = `SELECT term, value FROM %s WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY term DESC LIMIT 1`
	lastTermSQL = `SELECT COALESCE(MAX(term), 0) FROM %s WHERE name = ?`
	termsSQL    = `SELECT term, value FROM %s WHERE name = ? AND term > ? ORDER BY term LIMIT 100`
	pruneSQL    = `DELETE FROM %s WHERE name = ? AND term < ?`
)

type electionStatements struct{ head, campaign, refresh, resign, tidy, leader, last, terms, prune *sql.Stmt }

func (s *electionStatements) close() {
	for _, st := range []*sql.Stmt{s.head, s.campaign, s.refresh, s.resign, s.tidy, s.leader, s.last, s.terms, s.prune} {
		if st != nil {
			st.Close()
		}
	}
}

var _ driver.Elector = (*tableDriver)(nil)

// ElectionsTable is the name of the table of the elections that go with the lock
// table named table.
func ElectionsTable(table string) string { return table + "_elections" }

// electionTable is the name of the elections table.
func (d *tableDriver) electionTable() string { return ElectionsTable(d.cfg.table) }

// migrateElections creates the elections table beside table (Migrate).
func migrateElections(ctx context.Context, db *sql.DB, table string) error {
	name := ElectionsTable(table) // fits: validateTable keeps room for the suffix
	if _, err := db.ExecContext(ctx, fmt.Sprintf(createElectionTable, quoteIdent(name))); err != nil {
		return fmt.Errorf("create table %s: %w", quoteIdent(name), err)
	}
	return nil
}

// electionStmts prepares the statements on the elections table on first use (the
// table is Migrate's, as the lock table is).
func (d *tableDriver) electionStmts(ctx context.Context) (*electionStatements, error) {
	return prepareOnce(ctx, d, &d.elections, d.electionTable(), func(s *electionStatements) []stmtDef {
		return []stmtDef{{&s.head, headSQL}, {&s.campaign, campaignSQL}, {&s.refresh, termRefreshSQL},
			{&s.resign, termResignSQL}, {&s.tidy, termTidySQL}, {&s.leader, leaderSQL}, {&s.last, lastTermSQL},
			{&s.terms, termsSQL}, {&s.prune, pruneSQL}}
	})
}

func (d *tableDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	s, err := d.electionStmts(ctx)
	if err != nil {
		return nil, err
	}
	tm := &tableTerm{s: s, name: []byte(name)}
	if _, err := rand.Read(tm.owner[:]); err != nil {
		return nil, fmt.Errorf("owner id: %w", err)
	}
	var last uint64
	var live bool
	switch err := s.head.QueryRowContext(ctx, tm.name).Scan(&last, &live); {
	case errors.Is(err, sql.ErrNoRows): // the first term
	case err != nil:
		return nil, fmt.Errorf("campaign: %w", err)
	case live:
		return nil, driver.Busy(0)
	}
	tm.term = last + 1
	_, err = s.campaign.ExecContext(ctx, tm.name, tm.term, tm.owner[:], []byte(value), micros(ttl))
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && (me.Number == erDupEntry || me.Number == erLockDeadlock):
		return nil, driver.Busy(0)
	case err != nil:
		if ctx.Err() != nil {
			tm.tidyUp(d) // it may have run on the server after the client gave up
		}
		return nil, fmt.Errorf("campaign: %w", err)
	}
	if tm.term%100 == 0 && tm.term > keptTerms {
		_, _ = s.prune.ExecContext(ctx, tm.name, tm.term-keptTerms)
	}
	return tm, nil
}

func (d *tableDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	s, err := d.electionStmts(ctx)
	if err != nil {
		return driver.Leader{}, err
	}
	var l driver.Leader
	err = s.leader.QueryRowContext(ctx, []byte(name)).Scan(&l.Token, &l.Value)
	if errors.Is(err, sql.ErrNoRows) {
		return l, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
	}
	return l, err
}

// WatchLeaders reports the live leader, then polls the terms table for later terms.
func (d *tableDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	s, err := d.electionStmts(ctx)
	if err != nil {
		return err
	}
	return generic.WatchTerms(ctx, generic.TermSource{
		Last: func(ctx context.Context) (last uint64, err error) {
			err = s.last.QueryRowContext(ctx, []byte(name)).Scan(&last)
			return last, err
		},
		Leader: func(ctx context.Context) (driver.Leader, error) { return d.Leader(ctx, name) },
		After: func(ctx context.Context, after uint64) (terms []driver.Leader, err error) {
			rows, err := s.terms.QueryContext(ctx, []byte(name), after)
			if err != nil {
				return nil, err
			}
			defer func() { err = errors.Join(err, rows.Close()) }()
			for rows.Next() {
				var l driver.Leader
				if err := rows.Scan(&l.Token, &l.Value); err != nil {
					return nil, err
				}
				terms = append(terms, l)
			}
			return terms, rows.Err()
		},
	}, after, nil, observePoll, found)
}

// tableTerm is one term: its row, identified by the owner value.
type tableTerm struct {
	s     *electionStatements
	name  []byte
	term  uint64
	owner [16]byte
}

func (tm *tableTerm) Token() uint64 { return tm.term }

func (tm *tableTerm) Refresh(ctx context.Context, ttl time.Duration) error {
	res, err := tm.s.refresh.ExecContext(ctx, micros(ttl), tm.name, tm.term, tm.owner[:])
	return owned(ctx, "refresh term", nil, res, err)
}

func (tm *tableTerm) Unlock(ctx context.Context) error {
	res, err := tm.s.resign.ExecContext(ctx, tm.name, tm.term, tm.owner[:])
	return owned(ctx, "resign", func(ctx context.Context) { _, _ = tm.s.tidy.ExecContext(ctx, tm.name, tm.term, tm.owner[:]) }, res, err)
}

// tidyUp ends every term this campaign may have won, in the background, bounded.
// The term number is unknown: it ends whichever term carries our owner value.
func (tm *tableTerm) tidyUp(d *tableDriver) {
	q := fmt.Sprintf("UPDATE %s SET expires_at = "+freeAt+" WHERE name = ? AND owner = ?", quoteIdent(d.electionTable()))
	d.inBackground(func(ctx context.Context) { _, _ = d.db.ExecContext(ctx, q, tm.name, tm.owner[:]) })
}
