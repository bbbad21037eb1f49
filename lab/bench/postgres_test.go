package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock-go/dlock/internal/servers"
)

// TestPgTransactionsCounts: PostgreSQL's request counter has every statement of a
// session that just closed — the server flushes a session's counts at most once a
// second, and at its exit, so a read that did not wait for the exit would miss them
// — and refuses to count while a session of the database is still open.
func TestPgTransactionsCounts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := newEnv()
	defer e.close()
	e.start(ctx, Postgres)
	if err := e.missing[Postgres]; err != nil {
		if servers.IsMissing(err) && !servers.RequireServers() {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	session := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(e.ep.Postgres.String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // one message, one transaction
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	before, err := pgTransactions(ctx, e.ep.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	const statements = 40
	c := session()
	for range statements {
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := pgTransactions(ctx, e.ep.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	// Autovacuum may add a few transactions of its own if it visited the database.
	if n := after - before; n < statements || n > statements+10 {
		t.Errorf("counted %d transactions for %d statements", n, statements)
	}

	open := session()
	defer open.Close(context.Background())
	if _, err := open.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if n, err := pgTransactions(sctx, e.ep.Postgres); err == nil || !strings.Contains(err.Error(), "still open") {
		t.Errorf("with a session open: %d, %v; want an error saying a session is still open", n, err)
	}
}
