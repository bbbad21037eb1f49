package pglock_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/pglock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// listed returns the keys dlock.List shows under prefix.
func listed(t *testing.T, l dlock.Locker, prefix string) []string {
	t.Helper()
	states, err := dlock.List(ctxFor(t, 30*time.Second), l, prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	var keys []string
	for _, s := range states {
		keys = append(keys, s.Key)
	}
	return keys
}

// TestDescribePrefixIsBytes: on both modes, List compares the prefix byte for byte:
// % and _ match only themselves (no LIKE pattern), and a prefix of non-ASCII
// letters matches only keys that begin with its bytes (no collation).
func TestDescribePrefixIsBytes(t *testing.T) {
	p := servertest.Postgres(t)
	for _, scheme := range []string{pglock.Scheme, pglock.AdvisoryScheme} {
		t.Run(scheme, func(t *testing.T) {
			url := lockURL(scheme, p.Addr(), servertest.PostgresDatabase(t, p), "")
			holder, inspector := servertest.Open(t, url), servertest.Open(t, url)
			keys := []string{"p%/1", "pX/2", "p_/3", "ü/4", "u/5", "ú/6"}
			for _, k := range keys {
				ls := tryAcquire(t, holder, k, dlock.WithTTL(time.Minute))
				t.Cleanup(func() { _ = ls.Release(ctxFor(t, 10*time.Second)) })
			}
			for prefix, want := range map[string][]string{
				"p%": {"p%/1"}, "p_": {"p_/3"}, "p": {"p%/1", "pX/2", "p_/3"},
				"ü": {"ü/4"}, "u": {"u/5"}, "": keys,
			} {
				want = slices.Sorted(slices.Values(want))
				if got := listed(t, inspector, prefix); !slices.Equal(got, want) {
					t.Errorf("List(%q) = %q, want %q", prefix, got, want)
				}
			}
		})
	}
}

// TestDescribeMissingTables: a Locker whose tables were never made, or whose user
// may not read them, describes and lists nothing, without an error, on both modes
// — while another client holds the key.
func TestDescribeMissingTables(t *testing.T) {
	p := servertest.Postgres(t)
	db := servertest.PostgresDatabase(t, p)
	admin := pool(t, p.URL(db))
	for _, scheme := range []string{pglock.Scheme, pglock.AdvisoryScheme} {
		ls := tryAcquire(t, servertest.Open(t, lockURL(scheme, p.Addr(), db, "")), "held/"+scheme, dlock.WithTTL(time.Minute))
		t.Cleanup(func() { _ = ls.Release(ctxFor(t, 10*time.Second)) })
	}
	role := fmt.Sprintf("nobody_%d", time.Now().UnixNano())
	if err := p.Exec(ctxFor(t, 10*time.Second), db, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Exec(ctxFor(t, 10*time.Second), db, "DROP ROLE IF EXISTS "+role) })
	nobody := pool(t, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", role, p.Addr(), db))
	// The tables are there, and read by a user who may: the keys are held.
	for _, l := range []dlock.Locker{pglock.New(admin), pglock.NewAdvisory(admin)} {
		t.Cleanup(func() { l.Close() })
		if got := listed(t, l, "held/"); len(got) != 1 {
			t.Fatalf("the superuser lists %q, want the key held in this mode", got)
		}
	}
	for name, l := range map[string]dlock.Locker{
		"table never made":    pglock.New(admin, pglock.WithTable("never_made"), pglock.WithFIFO(true)),
		"registry never made": pglock.NewAdvisory(admin, pglock.WithRegistry("never_made")),
		"table unreadable":    pglock.New(nobody, pglock.WithFIFO(true)),
		"registry unreadable": pglock.NewAdvisory(nobody),
	} {
		t.Cleanup(func() { l.Close() })
		for _, scheme := range []string{pglock.Scheme, pglock.AdvisoryScheme} {
			key := "held/" + scheme
			if got, err := dlock.Describe(ctxFor(t, 10*time.Second), l, key); err != nil || len(got) != 0 {
				t.Errorf("%s: Describe(%q) = %+v, %v; want nothing", name, key, got, err)
			}
		}
		if got, err := dlock.List(ctxFor(t, 10*time.Second), l, ""); err != nil || len(got) != 0 {
			t.Errorf("%s: List = %+v, %v; want nothing", name, got, err)
		}
	}
}
