package zklock

import (
	"net/url"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of zk:// URLs on any input (urlfuzz.Fuzz: no panic,
// errors wrap dlock.ErrInvalidURL and show no password, the declaration agrees);
// an accepted URL names hosts with ports, a root ZooKeeper takes (absolute, no
// empty, "." or ".." segment, not /zookeeper, no ".elections" segment),
// credentials as user:password or none, and a session timeout within its bounds.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			z, err := parseURL(u)
			if err != nil {
				return err
			}
			urlfuzz.CheckHosts(t, u, z.hosts)
			switch {
			case validateRoot(z.root) != nil || strings.Contains(z.root+"/", "/"+electionsDir+"/"):
				t.Fatalf("%s: root %q", u.Redacted(), z.root)
			case (z.user == "") != (z.pass == ""):
				t.Fatalf("%s: user %q with a password of %d bytes", u.Redacted(), z.user, len(z.pass))
			case z.timeout < minSessionTimeout || z.timeout > maxSessionTimeout:
				t.Fatalf("%s: session timeout %v", u.Redacted(), z.timeout)
			}
			return nil
		}})
}
