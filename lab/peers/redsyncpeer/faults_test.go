package redsyncpeer_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/redsyncpeer"
)

// faultHarness adds holder processes (by URL) and a client whose link can be
// blackholed to the conformance harness, on one master.
type faultHarness struct{ harness }

func (h faultHarness) URL(t testing.TB) string {
	return redsyncpeer.Scheme + "://" + h.masters[0].Addr()
}

func (h faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	p := servertest.Proxy(t, h.masters[0].Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return redsyncpeer.New([]redis.UniversalClient{c}), p
}

// TestFaults runs the fault campaign on redsync with one master: a killed holder's
// lock expires after its TTL, a paused holder writes after its lock went to another
// (no fencing), and a blackholed holder's lease ends at redsync's Until() before the
// key expires on the server.
func TestFaults(t *testing.T) {
	conformance.RunFaults(t, faultHarness{harness{[]*servers.Redis{servertest.Redis(t)}}})
}
