package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Leader election (dlock.NewElection) of the lease table, in a table of its own
// (ElectionsTable): one row per term, keyed by the election's name and the term's
// number, which is its fencing token. A campaign is one statement that inserts the
// next term only if no term of the election is live by the database server's
// clock; two campaigns that both find none insert the same term number, and the
// primary key keeps one (ON CONFLICT DO NOTHING: the other gets no row, busy).
// Refresh and resignation update the term's row, owner-checked. A new term and a
// resignation are announced (pg_notify) to waiting candidates and observers; the
// rows are the history of the election, so observers see every term; the oldest
// are pruned past keptTerms.

// ElectionsTable is the name of the table of the elections that go with the lock
// table named table.
func ElectionsTable(table string) string { return table + electionsSuffix }

// keptTerms is how many terms per election the table keeps.
const keptTerms = 1000

// observePoll is how often an observer reads the terms table when no notification
// wakes it.
const observePoll = 250 * time.Millisecond

const createElections = `CREATE TABLE IF NOT EXISTS %s (
  name       bytea NOT NULL,
  term       bigint NOT NULL,
  owner      uuid NOT NULL,
  value      bytea NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, term)
)`

const (
	// campaignSQL inserts the next term if every term of the election has ended (or
	// there is none) and announces it. Arguments: name, owner, value, ttl µs,
	// channel, payload.
	campaignSQL = `INSERT INTO %[1]s (name, term, owner, value, expires_at)
SELECT $1, COALESCE(MAX(term), 0) + 1, $2, $3, statement_timestamp() + $4::bigint * interval '1 microsecond'
FROM %[1]s WHERE name = $1
HAVING COALESCE(MAX(expires_at), '-infinity') <= statement_timestamp()
ON CONFLICT (name, term) DO NOTHING
RETURNING term, pg_notify($5, $6)::text`
	// The term's row, owner-checked. Arguments: name, term, owner (, ttl µs).
	termRefreshSQL = `UPDATE %s SET expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
WHERE name = $1 AND term = $2 AND owner = $3 AND expires_at > statement_timestamp()`
	// termResignSQL ends the term and reports whether it was live. Arguments: name,
	// term, owner, channel, payload.
	termResignSQL = `UPDATE %[1]s AS e SET expires_at = '-infinity'
FROM (SELECT expires_at AS was FROM %[1]s WHERE name = $1 AND term = $2 AND owner = $3) o
WHERE e.name = $1 AND e.term = $2 AND e.owner = $3
RETURNING o.was > statement_timestamp(), pg_notify($4, $5)::text`
	// termTidySQL ends whichever term carries the owner (a campaign whose answer was
	// lost). Arguments: name, owner.
	termTidySQL = `UPDATE %s SET expires_at = '-infinity' WHERE name = $1 AND owner = $2`
	leaderSQL   = `SELECT term, value FROM %s WHERE name = $1 AND expires_at > statement_timestamp() ORDER BY term DESC LIMIT 1`
	lastTermSQL = `SELECT COALESCE(MAX(term), 0) FROM %s WHERE name = $1`
	termsSQL    = `SELECT term, value FROM %s WHERE name = $1 AND term > $2 ORDER BY term LIMIT 100`
	pruneSQL    = `DELETE FROM %s WHERE name = $1 AND term < $2`
)

type electionStatements struct{ campaign, refresh, resign, tidy, leader, last, terms, prune string }

func newElectionStatements(table string) electionStatements {
	e := quoteIdent(ElectionsTable(table))
	f := func(q string) string { return fmt.Sprintf(q, e) }
	return electionStatements{f(campaignSQL), f(termRefreshSQL), f(termResignSQL), f(termTidySQL),
		f(leaderSQL), f(lastTermSQL), f(termsSQL), f(pruneSQL)}
}

var (
	_ driver.Elector          = (*tableDriver)(nil)
	_ driver.CampaignNotifier = (*tableDriver)(nil)
)

// CampaignWake is the name whose releases announce election name's new terms and
// resignations (driver.CampaignNotifier): not valid UTF-8, so never a mutex's key.
func (d *tableDriver) CampaignWake(name string) string { return "\xffelection\xff" + name }

func (d *tableDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	owner, err := newOwner()
	if err != nil {
		return nil, err
	}
	tm := &tableTerm{d: d, name: []byte(name), owner: owner}
	var term int64
	var void string
	err = d.pool.QueryRow(ctx, d.elect.campaign, tm.name, tm.owner, []byte(value), micros(ttl),
		d.hub.channel, keyPayload(d.CampaignWake(name))).Scan(&term, &void)
	switch {
	case errors.Is(err, pgx.ErrNoRows), isSerialization(err):
		return nil, driver.Busy(0)
	case err != nil:
		if ctx.Err() != nil {
			tm.tidyUp() // the campaign may have won on the server after the client gave up
		}
		return nil, fmt.Errorf("campaign: %w", err)
	}
	tm.term = uint64(term)
	if tm.term%100 == 0 && tm.term > keptTerms {
		_, _ = d.pool.Exec(ctx, d.elect.prune, tm.name, int64(tm.term-keptTerms))
	}
	return tm, nil
}

func (d *tableDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	if err := d.ready(ctx); err != nil {
		return driver.Leader{}, err
	}
	var l driver.Leader
	var value []byte
	err := d.pool.QueryRow(ctx, d.elect.leader, []byte(name)).Scan(&l.Token, &value)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
	}
	l.Value = string(value)
	return l, err
}

// WatchLeaders reports the live leader, then reads the terms table for later terms
// whenever a new term is announced, and at least every observePoll.
func (d *tableDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	if err := d.ready(ctx); err != nil {
		return err
	}
	var wake <-chan struct{}
	if w, stop, err := d.hub.subscribe(ctx, keyPayload(d.CampaignWake(name))); err == nil {
		defer stop()
		wake = w
	}
	return generic.WatchTerms(ctx, generic.TermSource{
		Last: func(ctx context.Context) (last uint64, err error) {
			err = d.pool.QueryRow(ctx, d.elect.last, []byte(name)).Scan(&last)
			return last, err
		},
		Leader: func(ctx context.Context) (driver.Leader, error) { return d.Leader(ctx, name) },
		After: func(ctx context.Context, after uint64) ([]driver.Leader, error) {
			rows, err := d.pool.Query(ctx, d.elect.terms, []byte(name), int64(after))
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var terms []driver.Leader
			for rows.Next() {
				var l driver.Leader
				var value []byte
				if err := rows.Scan(&l.Token, &value); err != nil {
					return nil, err
				}
				l.Value = string(value)
				terms = append(terms, l)
			}
			return terms, rows.Err()
		},
	}, after, wake, observePoll, found)
}

// tableTerm is one term: its row, identified by the owner value.
type tableTerm struct {
	d     *tableDriver
	name  []byte
	term  uint64
	owner pgtype.UUID
}

func (tm *tableTerm) Token() uint64 { return tm.term }

func (tm *tableTerm) Refresh(ctx context.Context, ttl time.Duration) error {
	return tm.d.refreshRow(ctx, "refresh term", tm.d.elect.refresh, tm.name, int64(tm.term), tm.owner, micros(ttl))
}

func (tm *tableTerm) Unlock(ctx context.Context) error {
	return tm.d.releaseRow(ctx, "resign", tm.d.elect.resign, tm.name, int64(tm.term), tm.owner,
		tm.d.hub.channel, keyPayload(tm.d.CampaignWake(string(tm.name))))
}

// tidyUp ends every term this campaign may have won, in the background, bounded.
func (tm *tableTerm) tidyUp() {
	tm.d.inBackground(func(ctx context.Context) { _, _ = tm.d.pool.Exec(ctx, tm.d.elect.tidy, tm.name, tm.owner) })
}
