package mysqllock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/internal/measure"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// compare runs b.N uncontended cycles of each of ours and raw, interleaved so that
// both see the same server and machine conditions, and reports both p50s and their
// ratio.
func compare(b *testing.B, ours, raw func() error) {
	for range 20 { // warm up: connections, prepared statements
		if err := ours(); err != nil {
			b.Fatal(err)
		}
		if err := raw(); err != nil {
			b.Fatal(err)
		}
	}
	os, rs := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := raw(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := ours(); err != nil {
			b.Fatal(err)
		}
		rs, os = append(rs, t1.Sub(t0)), append(os, time.Since(t1))
	}
	b.StopTimer()
	o, r := measure.Summarize(os), measure.Summarize(rs)
	b.ReportMetric(float64(o.P50.Nanoseconds()), "dlock-p50-ns")
	b.ReportMetric(float64(r.P50.Nanoseconds()), "raw-p50-ns")
	b.ReportMetric(float64(o.P99.Nanoseconds()), "dlock-p99-ns")
	b.ReportMetric(float64(r.P99.Nanoseconds()), "raw-p99-ns")
	b.ReportMetric(float64(o.P50)/float64(r.P50), "p50-ratio")
}

// BenchmarkAcquireRelease compares an uncontended TryAcquire+Release with New against
// the bare statements of the classic unique-index lock, an INSERT and an
// owner-checked DELETE (prepared, one round trip each), on the same pool.
func BenchmarkAcquireRelease(b *testing.B) {
	dsn := servertest.MySQLDSN(b)
	db := openDB(b, dsn, nil)
	ctx := context.Background()
	if err := mysqllock.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE raw_locks (lock_key VARBINARY(255) NOT NULL PRIMARY KEY,
		owner BINARY(16) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB`); err != nil {
		b.Fatal(err)
	}
	ins := prepare(b, db, "INSERT INTO raw_locks (lock_key, owner, expires_at) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)")
	del := prepare(b, db, "DELETE FROM raw_locks WHERE lock_key = ? AND owner = ?")
	l := mysqllock.New(db)
	defer l.Close()
	raw := func() error {
		var owner [16]byte
		_, _ = rand.Read(owner[:])
		if _, err := ins.ExecContext(ctx, "bench/raw", owner[:], int64(10*time.Second/time.Microsecond)); err != nil {
			return err
		}
		res, err := del.ExecContext(ctx, "bench/raw", owner[:])
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("raw DELETE removed %d rows", n)
		}
		return nil
	}
	compare(b, func() error { return measure.Cycle(ctx, l, "bench/dlock") }, raw)
}

// BenchmarkGetLockAcquireRelease compares an uncontended TryAcquire+Release with
// NewGetLock against a bare GET_LOCK(name, 0) and RELEASE_LOCK on a connection taken
// from the same pool for the cycle.
func BenchmarkGetLockAcquireRelease(b *testing.B) {
	db := openDB(b, servertest.MySQLDSN(b), nil)
	ctx := context.Background()
	l := mysqllock.NewGetLock(db)
	defer l.Close()
	name := mysqllock.GetLockName("bench/raw")
	raw := func() error {
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('"+name+"', 0)").Scan(&got); err != nil || got.Int64 != 1 {
			return fmt.Errorf("GET_LOCK: %v %v", got, err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK('"+name+"')").Scan(&got); err != nil || got.Int64 != 1 {
			return fmt.Errorf("RELEASE_LOCK: %v %v", got, err)
		}
		return nil
	}
	compare(b, func() error { return measure.Cycle(ctx, l, "bench/dlock") }, raw)
}

func prepare(b *testing.B, db *sql.DB, query string) *sql.Stmt {
	st, err := db.PrepareContext(context.Background(), query)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}
