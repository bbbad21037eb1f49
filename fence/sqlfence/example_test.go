package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/sqlfence"
)

// A holder's write to a SQL table, guarded in its own transaction: a holder whose
// lease was superseded is refused, and rolls back. (Needs a database: not run.)
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	guard, err := sqlfence.New(db, sqlfence.MySQL)
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx); err != nil {
		log.Fatal(err)
	}
	var locker dlock.Locker // any backend with tokens: mysqllock.New(db), …
	lease, err := locker.Acquire(ctx, "invoices/42", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	writer := fence.NewWriter()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	err = guard.Tx(ctx, tx, "invoices/42", lease.Token(), writer)
	if errors.Is(err, fence.ErrStale) {
		log.Print("a newer holder has written: ", err)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE invoices SET status = 'paid' WHERE id = 42"); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
