package mysqllock

import (
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parsers of mysql:// and mysql+getlock:// URLs on any input
// (urlfuzz.Fuzz: no panic, errors wrap dlock.ErrInvalidURL and show no password,
// the declarations agree); an accepted URL gives a driver configuration that reads
// back the same (user, password, address, database), a table MySQL can create with
// its companions, and parameters within their bounds.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f,
		urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declareTable),
			Parse: func(t *testing.T, u *url.URL) error {
				cfg, _, c, err := parseTable(u)
				if err == nil && validateTable(c.table) != nil {
					t.Fatalf("%s: accepted table %q", u.Redacted(), c.table)
				}
				return readsBack(t, u, cfg, err)
			}},
		urlfuzz.Target{Schemes: []string{GetLockScheme}, Declare: urlfuzz.Declaration(declareGetLock),
			Parse: func(t *testing.T, u *url.URL) error {
				cfg, c, wait, err := parseGetLock(u)
				if err == nil && (wait < time.Second || wait > maxWaitTimeout*time.Second && wait != defaultWaitTimeout ||
					c.check < minCheckInterval || c.check > maxCheckInterval || c.maxConns < 1 || c.maxConns > maxMaxConns) {
					t.Fatalf("%s: wait_timeout %v, check_interval %v, max_conns %d", u.Redacted(), wait, c.check, c.maxConns)
				}
				return readsBack(t, u, cfg, err)
			}})
}

// readsBack checks cfg, accepted for u (err == nil), with urlfuzz.CheckDSN; it
// returns err.
func readsBack(t *testing.T, u *url.URL, cfg *mysql.Config, err error) error {
	t.Helper()
	if err == nil {
		urlfuzz.CheckDSN(t, u, cfg)
	}
	return err
}
