package redislock

import (
	"net/url"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/urlfuzz"
)

// FuzzParseURL: the parser of redis://, rediss:// and redis+setnx:// URLs on any
// input (urlfuzz.Fuzz: no panic, errors wrap dlock.ErrInvalidURL and show no
// password, the declarations agree); an accepted URL names hosts with ports, a
// database the topology allows, and parameters within their bounds.
func FuzzParseURL(f *testing.F) {
	parse := func(t *testing.T, u *url.URL) error {
		r, err := parseURL(u)
		if err != nil {
			return err
		}
		urlfuzz.CheckHosts(t, u, r.hosts)
		_, waits := u.Query()["wait_replicas"]
		switch {
		case r.db < 0 || r.cluster && r.db != 0:
			t.Fatalf("%s: database %d (cluster %v)", u.Redacted(), r.db, r.cluster)
		case r.cluster && r.master != "":
			t.Fatalf("%s: a Cluster of Sentinels", u.Redacted())
		case r.ack < 0 || r.ack > maxWaitReplicas:
			t.Fatalf("%s: wait_replicas %d", u.Redacted(), r.ack)
		case waits && (r.ackTimeout < time.Millisecond || r.ackTimeout > maxWaitTimeout):
			t.Fatalf("%s: wait_timeout %v", u.Redacted(), r.ackTimeout)
		case u.Scheme == SchemeTLS && r.tls == nil:
			t.Fatalf("%s: rediss:// without TLS", u.Redacted())
		case u.Scheme == SchemeSETNX && r.variant != SETNXExpire && r.variant != SETNXGetSet:
			t.Fatalf("%s: variant %v", u.Redacted(), r.variant)
		}
		return nil
	}
	urlfuzz.Fuzz(f,
		urlfuzz.Target{Schemes: []string{Scheme, SchemeTLS}, Parse: parse, Declare: urlfuzz.Declaration(declare)},
		urlfuzz.Target{Schemes: []string{SchemeSETNX}, Parse: parse, Declare: urlfuzz.Declaration(declareSETNX)})
}
