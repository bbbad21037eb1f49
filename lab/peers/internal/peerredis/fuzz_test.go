package peerredis

import (
	"testing"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParse: the parser of the Redis peers' URLs (peer+bsm://, peer+redsync://,
// through peerurl.Hosts and peerurl.RedisDB) on any input: no panic; errors wrap
// dlock.ErrInvalidURL and show no password; an accepted URL names at most max
// hosts, each host:port, no query parameter and a database number >= 0.
func FuzzParse(f *testing.F) {
	for _, s := range urlfuzz.Seeds {
		f.Add(s, 1)
		f.Add(s, 0)
	}
	f.Fuzz(func(t *testing.T, raw string, max int) {
		u, ok := urlfuzz.Parse(urlfuzz.WithScheme("peer+bsm", raw))
		if !ok {
			return
		}
		hosts, db, err := Parse(u, max)
		urlfuzz.CheckErr(t, raw, err)
		if err != nil {
			return
		}
		urlfuzz.CheckHosts(t, u, hosts)
		if max > 0 && len(hosts) > max || db < 0 || len(u.Query()) > 0 {
			t.Fatalf("%s: hosts %q, database %d", u.Redacted(), hosts, db)
		}
	})
}
