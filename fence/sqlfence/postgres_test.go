package sqlfence_test

import (
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/fence/sqlfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// postgres is a fresh database on the shared PostgreSQL, through pgx's database/sql
// driver, with pglock's tokens.
func postgres(t *testing.T) *store {
	p := servertest.Postgres(t)
	url := p.URL(servertest.PostgresDatabase(t, p))
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	g := prepare(t, db, sqlfence.PostgreSQL, "CREATE TABLE invoices (id text PRIMARY KEY, body text NOT NULL)")
	return &store{db: db, g: g,
		upsert:     "INSERT INTO invoices VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = excluded.body",
		selectBody: "SELECT body FROM invoices WHERE id = $1",
		lockWaits:  "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
		pollEvery:  10 * time.Millisecond,
		lockers: func(t *testing.T) (dlock.Locker, dlock.Locker) {
			pool, err := pgxpool.New(fencetest.Ctx(t, 30*time.Second), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			if err := pglock.Migrate(fencetest.Ctx(t, 30*time.Second), pool); err != nil {
				t.Fatal(err)
			}
			return pglock.New(pool), pglock.New(pool)
		}}
}
