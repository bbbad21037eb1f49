package memlock

import (
	"net/url"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of mem:// URLs on any input (urlfuzz.Fuzz: no panic,
// errors wrap dlock.ErrInvalidURL and show no password, the declaration agrees);
// it accepts mem:// alone (no host, user, path or parameter).
func FuzzParseURL(f *testing.F) {
	f.Add("mem:///")
	f.Add("mem://?")
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			err := parseURL(u)
			if err == nil && (u.Host != "" || u.User != nil || u.Path != "" && u.Path != "/" || len(u.Query()) > 0) {
				t.Fatalf("%s: accepted", u.Redacted())
			}
			return err
		}})
}
