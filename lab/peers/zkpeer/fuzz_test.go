package zkpeer

import (
	"net/url"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of peer+zk:// URLs on any input (urlfuzz.Fuzz: no panic,
// errors wrap dlock.ErrInvalidURL and show no password, the declaration agrees);
// an accepted URL names hosts with ports and a session timeout within its bounds.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			hosts, timeout, _, err := parseURL(u)
			if err == nil {
				urlfuzz.CheckHosts(t, u, hosts)
				if timeout < minSessionTimeout || timeout > maxSessionTimeout {
					t.Fatalf("%s: session timeout %v", u.Redacted(), timeout)
				}
			}
			return err
		}})
}
