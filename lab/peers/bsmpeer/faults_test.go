package bsmpeer_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/bsmpeer"
)

// faultHarness adds holder processes (by URL) and a client whose link can be
// blackholed to the conformance harness.
type faultHarness struct{ harness }

func (h faultHarness) URL(t testing.TB) string { return bsmpeer.Scheme + "://" + h.r.Addr() }

func (h faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p := servertest.Proxy(t, h.r.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return bsmpeer.New(c), p
}

// TestFaults runs the fault campaign on redislock: a killed holder's lock expires
// after its TTL, a paused holder writes after its lock went to another (no fencing,
// with or without a fenced resource), and a blackholed holder's lease ends (at the
// adapter's estimate of the validity) before the key expires on the server.
func TestFaults(t *testing.T) {
	conformance.RunFaults(t, faultHarness{harness{servertest.Redis(t)}})
}
