package pglock

import (
	"net/url"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parsers of postgres://, postgresql:// and postgres+advisory://
// URLs on any input (urlfuzz.Fuzz: no panic, errors wrap dlock.ErrInvalidURL and
// show no password, the declarations agree); an accepted URL gives a configuration
// that reads back the same user and password, with table names PostgreSQL keeps
// and parameters within their bounds.
func FuzzParseURL(f *testing.F) {
	check := func(advisory bool) func(t *testing.T, u *url.URL) error {
		return func(t *testing.T, u *url.URL) error {
			p, err := parseURL(u, advisory)
			if err != nil {
				return err
			}
			cc := p.cfg.ConnConfig
			if u.User != nil && (cc.User != u.User.Username() || cc.Password != urlfuzz.Password) {
				t.Fatalf("%s: the configuration reads back user %q", u.Redacted(), cc.User)
			}
			if p.maxConns < 1 || p.maxConns > maxURLConns || checkIdent("table", p.o.table, MaxTableLen) != nil ||
				checkIdent("registry", p.o.registry, maxIdent) != nil ||
				p.session != 0 && (p.session < minSessionTimeout || p.session > maxSessionTimeout) {
				t.Fatalf("%s: accepted max_conns %d, table %q, registry %q, session %v", u.Redacted(), p.maxConns, p.o.table, p.o.registry, p.session)
			}
			return nil
		}
	}
	urlfuzz.Fuzz(f,
		urlfuzz.Target{Schemes: []string{Scheme, "postgresql"}, Declare: urlfuzz.Declaration(declareTable), Parse: check(false)},
		urlfuzz.Target{Schemes: []string{AdvisoryScheme}, Declare: urlfuzz.Declaration(declareAdvisory), Parse: check(true)})
}
