package getlockpeer

import (
	"net/url"
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of peer+getlock:// URLs on any input (urlfuzz.Fuzz: no
// panic, errors wrap dlock.ErrInvalidURL and show no password, the declaration
// agrees); an accepted URL gives a driver configuration that reads back the same
// (user, password, address, database).
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			cfg, err := parseURL(u)
			if err == nil {
				urlfuzz.CheckDSN(t, u, cfg)
			}
			return err
		}})
}
