package pgadvisorypeer

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of peer+pgadvisory:// URLs on any input (urlfuzz.Fuzz: no
// panic, errors wrap dlock.ErrInvalidURL and show no password, the declaration
// agrees); an accepted URL gives a pool configuration with the URL's user, password,
// host, port and database, in plain text, of PoolSize connections.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			cfg, err := parseURL(u)
			if err != nil {
				return err
			}
			cc := cfg.ConnConfig
			host, port, _ := net.SplitHostPort(u.Host)
			if n, err := strconv.Atoi(port); err != nil || n != int(cc.Port) || cc.Host != host || cc.Host == "" ||
				cc.User != u.User.Username() || cc.User == "" || cc.Password != urlfuzz.Password ||
				cc.Database != strings.TrimPrefix(u.Path, "/") || strings.ContainsRune(cc.Database, 0) ||
				cc.TLSConfig != nil || len(cc.Fallbacks) > 0 || cfg.MaxConns != PoolSize {
				t.Fatalf("%s: the configuration reads back user %q, host %q, port %d, database %q, TLS %v, %d fallbacks, %d connections",
					u.Redacted(), cc.User, cc.Host, cc.Port, cc.Database, cc.TLSConfig != nil, len(cc.Fallbacks), cfg.MaxConns)
			}
			return nil
		}})
}
