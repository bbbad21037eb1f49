package mysqllock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// FuzzKeys: two valid keys that differ are two locks on a real server, in the
// table (a VARBINARY key: no collation folds case, trailing spaces or accents) and
// under GET_LOCK (GetLockName: the server compares lock names case-insensitively,
// up to 64 characters); the same key twice is one lock. GetLockName's names are at
// most 64 characters of "dlock:" and lower-case ASCII, or "dlock#" and hex digits.
func FuzzKeys(f *testing.F) {
	for _, k := range [][2]string{{"a", "A"}, {"a", "a "}, {"a", "a\x00b"}, {"é", "e\u0301"}, {"ss", "ß"},
		{"k", "k"}, {strings.Repeat("x", 58), strings.Repeat("x", 59)}, {"dlock:x", "x"}, {"a/b", "a%2Fb"}} {
		f.Add(k[0], k[1])
	}
	m := servertest.MySQL(f)
	db := openDB(f, servertest.NewDatabase(f, m), nil)
	ctx := context.Background()
	if err := mysqllock.Migrate(ctx, db); err != nil {
		f.Fatal(err)
	}
	table := []dlock.Locker{mysqllock.New(db), mysqllock.New(db)}
	getlock := []dlock.Locker{mysqllock.NewGetLock(db), mysqllock.NewGetLock(db)}
	f.Cleanup(func() {
		for _, l := range append(table, getlock...) {
			l.Close()
		}
	})
	f.Fuzz(func(t *testing.T, a, b string) {
		if dlock.ValidateKey(a) != nil || dlock.ValidateKey(b) != nil {
			return
		}
		for _, k := range []string{a, b} {
			n := mysqllock.GetLockName(k)
			plain, okPlain := strings.CutPrefix(n, "dlock:")
			hash, okHash := strings.CutPrefix(n, "dlock#")
			if len(n) > 64 || okPlain && strings.Trim(plain, "abcdefghijklmnopqrstuvwxyz0123456789-_./:") != "" ||
				okHash && strings.Trim(hash, "0123456789abcdef") != "" || !okPlain && !okHash {
				t.Fatalf("GetLockName(%q) = %q", k, n)
			}
		}
		if a != b && mysqllock.GetLockName(a) == mysqllock.GetLockName(b) {
			t.Fatalf("GetLockName(%q) = GetLockName(%q) = %q", a, b, mysqllock.GetLockName(a))
		}
		for what, ls := range map[string][]dlock.Locker{"table": table, "GET_LOCK": getlock} {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			first, err := ls[0].TryAcquire(cctx, a, dlock.WithTTL(10*time.Second))
			if err != nil {
				cancel()
				t.Fatalf("%s: TryAcquire(%q): %v", what, a, err)
			}
			second, err := ls[1].TryAcquire(cctx, b, dlock.WithTTL(10*time.Second))
			switch {
			case a == b && !errors.Is(err, dlock.ErrNotAcquired):
				t.Errorf("%s: the same key %q twice: %v, want ErrNotAcquired", what, a, err)
			case a != b && err != nil:
				t.Errorf("%s: %q while %q is held: %v, want a lock of its own", what, b, a, err)
			}
			if second != nil {
				_ = second.Release(cctx)
			}
			if err := first.Release(cctx); err != nil {
				t.Errorf("%s: Release(%q): %v", what, a, err)
			}
			cancel()
		}
	})
}
