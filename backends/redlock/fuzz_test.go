package redlock

import (
	"net/url"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of redlock:// URLs on any input (urlfuzz.Fuzz: no
// panic, errors wrap dlock.ErrInvalidURL and show no password, the declaration
// agrees); an accepted URL names distinct hosts with ports, and its options set a
// node timeout and a drift allowance (at least 1ms) within their bounds.
func FuzzParseURL(f *testing.F) {
	urlfuzz.Fuzz(f, urlfuzz.Target{Schemes: []string{Scheme}, Declare: urlfuzz.Declaration(declare),
		Parse: func(t *testing.T, u *url.URL) error {
			r, err := parseURL(u)
			if err != nil {
				return err
			}
			urlfuzz.CheckHosts(t, u, r.hosts)
			seen := map[string]bool{}
			for _, h := range r.hosts {
				if seen[h] {
					t.Fatalf("%s: host %q twice", u.Redacted(), h)
				}
				seen[h] = true
			}
			c := config{}
			for _, o := range r.opts {
				o(&c)
			}
			if c.nodeTimeout != 0 && (c.nodeTimeout < minNodeTimeout || c.nodeTimeout > maxNodeTimeout) {
				t.Fatalf("%s: node timeout %v", u.Redacted(), c.nodeTimeout)
			}
			if c.drift != nil {
				for _, ttl := range []time.Duration{MinTTL, time.Second, time.Hour} {
					if d := c.drift(ttl); d < minDriftFixed || d > time.Duration(maxDriftFactor*float64(ttl))+maxDriftFixed {
						t.Fatalf("%s: drift %v for a TTL of %v", u.Redacted(), d, ttl)
					}
				}
			}
			return nil
		}})
}
