package zkpeer_test

import (
	"fmt"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/lab/peers/zkpeer"
)

// faultHarness adds holder processes (by URL, with the same session timeout and
// root) and a client whose link can be blackholed to the conformance harness.
type faultHarness struct{ *harness }

func (h faultHarness) URL(t testing.TB) string {
	return fmt.Sprintf("%s://%s%s?session_timeout=%v", zkpeer.Scheme, h.z.Addr(), root, sessionTimeout)
}

func (h faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l := h.NewLocker(t)
	return l, h.proxies.Of(t, l)
}

// TestFaults runs the fault campaign on zk.Lock: a killed holder's session expires
// and frees the lock; a paused holder's session expires and it writes after another
// got the lock (no token to fence with); a blackholed holder hears of its session's
// expiry only when it reconnects, so its lease is still open when the server grants
// the lock to another (peer+zk declares Partition violated: the DeadlockFreedom
// weakness seen under a blackhole rather than a cut).
func TestFaults(t *testing.T) {
	conformance.RunFaults(t, faultHarness{newHarness(t)})
}
