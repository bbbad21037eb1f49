package bench

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
)

// PostgreSQL's part of the bench: the URLs of its targets, its raw baselines and
// the counter of its requests.

// The raw baselines of PostgreSQL: the lease table's statement pair on one pooled
// connection, and a session advisory lock and unlock on one pinned connection.
const (
	rawPgTable    = "INSERT ON CONFLICT DO NOTHING + DELETE"
	rawPgAdvisory = "pg_try_advisory_lock + pg_advisory_unlock"
)

// pgURL is the URL of ep's PostgreSQL database with scheme (postgres or
// postgres+advisory), the server URL's query (sslmode=disable for the servers
// package's own) followed by query.
func (ep Endpoints) pgURL(scheme, query string) string {
	u := *ep.Postgres
	u.Scheme = scheme
	if query != "" {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += query
	}
	return u.String()
}

// pgOpen opens a client of the lease table (postgres://) of ep's PostgreSQL
// database, with query.
func pgOpen(query string) func(context.Context, Endpoints, time.Duration) (dlock.Locker, error) {
	return func(ctx context.Context, ep Endpoints, _ time.Duration) (dlock.Locker, error) {
		return open(ep.pgURL("postgres", query))(ctx)
	}
}

// pgPool is a pool of one connection to ep's PostgreSQL database: every statement
// of a raw baseline runs on the same session.
func pgPool(ctx context.Context, ep Endpoints) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(ep.Postgres.String())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 1
	return pgxpool.NewWithConfig(ctx, cfg)
}

// openRawPgTable is the lease table's fewest round trips: INSERT … ON CONFLICT DO
// NOTHING of the key's row (the grant: one row inserted, none while another owner's
// row is there), then DELETE of the row WHERE owner is ours (the release), prepared
// once and run on one pooled connection, as openRawMySQL's pair.
func openRawPgTable(ctx context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
	pool, err := pgPool(ctx, ep)
	if err != nil {
		return nil, nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS raw_locks (lock_key bytea PRIMARY KEY,
		owner uuid NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		pool.Close()
		return nil, nil, err
	}
	const ins = `INSERT INTO raw_locks (lock_key, owner, expires_at)
		VALUES ($1, $2, statement_timestamp() + $3::bigint * interval '1 microsecond') ON CONFLICT DO NOTHING`
	const del = `DELETE FROM raw_locks WHERE lock_key = $1 AND owner = $2`
	k := []byte(key)
	owner := pgtype.UUID{Bytes: [16]byte([]byte("0123456789abcdef")), Valid: true}
	ttl := (10 * time.Second).Microseconds()
	cycle := func(ctx context.Context) error {
		tag, err := pool.Exec(ctx, ins, k, owner, ttl)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("raw postgres: %s is held", key)
		}
		if tag, err = pool.Exec(ctx, del, k, owner); err != nil {
			return err
		}
		if n := tag.RowsAffected(); n != 1 {
			return fmt.Errorf("raw DELETE removed %d rows", n)
		}
		return nil
	}
	return cycle, pool.Close, nil
}

// openRawPgAdvisory is the session advisory lock's fewest round trips:
// pg_try_advisory_lock then pg_advisory_unlock of the key's id (pglock.AdvisoryID),
// on one connection kept for the pair, as openRawGetLock's.
func openRawPgAdvisory(ctx context.Context, ep Endpoints, key string) (func(context.Context) error, func(), error) {
	pool, err := pgPool(ctx, ep)
	if err != nil {
		return nil, nil, err
	}
	id := pglock.AdvisoryID(key)
	cycle := func(ctx context.Context) error {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&got); err != nil || !got {
			return fmt.Errorf("pg_try_advisory_lock: %v %v", got, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&got); err != nil || !got {
			return fmt.Errorf("pg_advisory_unlock: %v %v", got, err)
		}
		return nil
	}
	return cycle, pool.Close, nil
}

// pgTransactions counts the requests of PostgreSQL's clients: the transactions,
// committed and rolled back, of the run's database (pg_stat_database's xact_commit +
// xact_rollback). Each statement a client sends outside a transaction of its own is
// one: an acquire, a release, a ping, a LISTEN, a pg_advisory_lock wait however
// long, a batch sent with one Sync; a transaction (BEGIN … COMMIT) is one however
// many statements it holds.
//
// A server process adds its transactions to the shared counters only now and then
// (at most once a second while busy, PGSTAT_MIN_INTERVAL) and when it exits, before
// it leaves pg_stat_activity; pg_stat_force_next_flush() flushes only the caller's
// own. So the count is read once no client session of the database is left: every
// session the clients opened has closed (Lockers close before the measurement
// returns) and added all its transactions. The count is then exact but for
// autovacuum's transactions, in it if autovacuum visited the database meanwhile (a
// few per visit, at most a visit a minute). A session still open when ctx ends (a
// client that did not close) is an error, not a count short of its last second.
// The reading runs on a connection to the "postgres" database, so that its own
// transactions are not counted.
func pgTransactions(ctx context.Context, db *url.URL) (int64, error) {
	admin := *db
	admin.Path = "/postgres"
	c, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return 0, err
	}
	defer c.Close(context.Background())
	name := strings.TrimPrefix(db.Path, "/")
	for open := -1; open != 0; {
		if open > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'", name).Scan(&open)
		if err != nil && open > 0 && ctx.Err() != nil {
			return 0, fmt.Errorf("%d sessions of database %s still open (their last transactions may be uncounted): %w", open, name, ctx.Err())
		}
		if err != nil {
			return 0, err
		}
	}
	var n int64
	err = c.QueryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1", name).Scan(&n)
	return n, err
}
