package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"

	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/sqlfence"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// The guard runs here on MariaDB and on PostgreSQL 15 (internal/servers), each test
// once per store (a subtest each): the fence table, an invoices table and the
// store's own lock, whose tokens the guard checks.

func TestMain(m *testing.M) { servertest.Main(m) }

// store is one database under test: a fresh database with the fence table (created
// twice: idempotent) and an invoices table, its guard, its dialect's statements, and
// a backend whose tokens a late writer carries.
type store struct {
	db *sql.DB
	g  *sqlfence.Guard
	// upsert writes an invoice (id, body); selectBody reads one (id).
	upsert, selectBody string
	// lockWaits counts the transactions waiting for a row lock; pollEvery is how
	// often it may be read (InnoDB refreshes INNODB_TRX only when it was not read for
	// 100ms: polled faster it keeps the table of the first read).
	lockWaits string
	pollEvery time.Duration
	// lockers returns two clients of the store's own lock backend.
	lockers func(t *testing.T) (a, b dlock.Locker)
}

// stores runs f on each store, as a subtest named after it.
func stores(t *testing.T, f func(t *testing.T, s *store)) {
	t.Run("MariaDB", func(t *testing.T) { f(t, mariaDB(t)) })
	t.Run("PostgreSQL", func(t *testing.T) { f(t, postgres(t)) })
}

// prepare makes g's table (twice) and the invoices table on db.
func prepare(t *testing.T, db *sql.DB, d sqlfence.Dialect, invoices string) *sqlfence.Guard {
	t.Cleanup(func() { db.Close() })
	g, err := sqlfence.New(db, d)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := g.CreateTable(fencetest.Ctx(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(fencetest.Ctx(t, 30*time.Second), invoices); err != nil {
		t.Fatal(err)
	}
	return g
}

// mariaDB is a fresh database on the shared MariaDB, with mysqllock's tokens.
func mariaDB(t *testing.T) *store {
	db, err := sql.Open("mysql", servertest.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	g := prepare(t, db, sqlfence.MySQL, "CREATE TABLE invoices (id VARBINARY(255) PRIMARY KEY, body TEXT NOT NULL)")
	return &store{db: db, g: g,
		upsert:     "INSERT INTO invoices VALUES (?, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)",
		selectBody: "SELECT body FROM invoices WHERE id = ?",
		lockWaits:  "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
		pollEvery:  200 * time.Millisecond,
		lockers: func(t *testing.T) (dlock.Locker, dlock.Locker) {
			if err := mysqllock.Migrate(fencetest.Ctx(t, 30*time.Second), db); err != nil {
				t.Fatal(err)
			}
			return mysqllock.New(db), mysqllock.New(db)
		}}
}

// txWrite is the guarded write: the guard, then the invoice, in one transaction.
func txWrite(s *store) fencetest.Write {
	return func(ctx context.Context, resource string, token uint64, writer, value string) error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := s.g.Tx(ctx, tx, resource, token, writer); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.upsert, resource, value); err != nil {
			return err
		}
		return tx.Commit()
	}
}

func invoice(t *testing.T, s *store) fencetest.Read {
	return func(ctx context.Context, resource string) string {
		var body string
		if err := s.db.QueryRowContext(ctx, s.selectBody, resource).Scan(&body); err != nil {
			t.Fatal(err)
		}
		return body
	}
}

// TestLateWrite: with the store's own lock tokens (mysqllock, pglock), the stale
// holder's guarded transaction is refused and the invoice is the next holder's.
func TestLateWrite(t *testing.T) {
	stores(t, func(t *testing.T, s *store) {
		a, b := s.lockers(t)
		defer a.Close()
		defer b.Close()
		fencetest.LateWrite(t, a, b, "invoices/42", 300*time.Millisecond, txWrite(s), invoice(t, s))
	})
}

// TestConcurrent: concurrent guarded transactions end with the largest token's
// invoice (the fence row's lock orders them).
func TestConcurrent(t *testing.T) {
	stores(t, func(t *testing.T, s *store) {
		fencetest.Concurrent(t, "r", 20, txWrite(s), invoice(t, s))
	})
}

// TestTxHoldsNewerGrants: a newer grant's guard waits while an older grant's guarded
// transaction is open, and is decided after its commit: the older write lands first,
// the newer one last; the older grant's next transaction is refused.
func TestTxHoldsNewerGrants(t *testing.T) {
	stores(t, func(t *testing.T, s *store) {
		ctx := fencetest.Ctx(t, time.Minute)
		old, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Rollback()
		if err := s.g.Tx(ctx, old, "inv", 1, "old"); err != nil {
			t.Fatal(err)
		}
		newer := make(chan error, 1)
		go func() { newer <- txWrite(s)(ctx, "inv", 2, "new", "new") }()
		// The store says when the newer transaction waits for the row; poll it.
		for waiting := 0; waiting == 0; {
			if err := s.db.QueryRowContext(ctx, s.lockWaits).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-newer:
				t.Fatalf("the newer grant's transaction ended (%v) while the older one held the fence", err)
			case <-time.After(s.pollEvery):
			}
		}
		if _, err := old.ExecContext(ctx, s.upsert, "inv", "old"); err != nil {
			t.Fatal(err)
		}
		if err := old.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := <-newer; err != nil {
			t.Fatalf("the newer grant after the older committed: %v", err)
		}
		if got := invoice(t, s)(ctx, "inv"); got != "new" {
			t.Fatalf("invoice %q, want the newer grant's", got)
		}
		if err := txWrite(s)(ctx, "inv", 1, "old", "old again"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the older grant after the newer: %v, want ErrStale", err)
		}
	})
}

// TestRollbackKeepsTheFence: a guarded transaction rolled back moves no fence; the
// rule's refusals say why; resources are compared byte for byte.
func TestRollbackKeepsTheFence(t *testing.T) {
	stores(t, func(t *testing.T, s *store) {
		ctx := fencetest.Ctx(t, time.Minute)
		g := s.g
		if err := g.Check(ctx, "inv", 4, "four"); err != nil {
			t.Fatal(err)
		}
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Tx(ctx, tx, "inv", 5, "five"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(ctx, "inv", 4, "four"); err != nil {
			t.Fatalf("token 4 after 5 was rolled back: %v", err)
		}
		var stale *fence.StaleError
		if err := g.Check(ctx, "inv", 4, "another"); !errors.As(err, &stale) || stale.Reason != fence.OtherWriter {
			t.Fatalf("token 4 from another writer: %v, want OtherWriter", err)
		}
		if err := g.Check(ctx, "inv", 3, "three"); !errors.As(err, &stale) || stale.Reason != fence.BelowFence || stale.Fence != 4 {
			t.Fatalf("token 3: %v, want BelowFence 4", err)
		}
		if err := g.Check(ctx, "inv", math.MaxInt64+1, "big"); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("a token above a BIGINT: %v, want ErrInvalid", err)
		}
		if err := g.Check(ctx, "Inv", 1, "w"); err != nil {
			t.Fatalf("another resource differing in case only: %v", err)
		}
	})
}

// TestNew: what New refuses.
func TestNew(t *testing.T) {
	for _, name := range []string{"", "a b", "x;DROP TABLE y", "1a", "a.b.c"} {
		if _, err := sqlfence.New(nil, sqlfence.MySQL, sqlfence.WithTable(name)); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("table %q: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := sqlfence.New(nil, sqlfence.Dialect(9)); !errors.Is(err, fence.ErrInvalid) {
		t.Errorf("an unknown dialect: %v", err)
	}
	if _, err := sqlfence.New(nil, sqlfence.PostgreSQL, sqlfence.WithTable("app.fences")); err != nil {
		t.Errorf("a schema-qualified table: %v", err)
	}
}
