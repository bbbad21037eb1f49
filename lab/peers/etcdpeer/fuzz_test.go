package etcdpeer

import (
	"net/url"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of peer+etcd:// URLs on any input (urlfuzz.Fuzz: no
// panic, errors wrap dlock.ErrInvalidURL and show no password, the declaration
// agrees); an accepted URL names hosts with ports and a session TTL within its
// bounds.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			hosts, _, ttl, err := parseURL(u)
			if err == nil {
				urlfuzz.CheckHosts(t, u, hosts)
				if ttl < 1 || ttl > maxSessionTTL {
					t.Fatalf("%s: session TTL %d", u.Redacted(), ttl)
				}
			}
			return err
		}})
}
