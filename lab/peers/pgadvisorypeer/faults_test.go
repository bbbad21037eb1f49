package pgadvisorypeer_test

import (
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

// holderFaults enables the holder-process scenarios (crash, pause).
type holderFaults struct{ *harness }

func (h holderFaults) URL(testing.TB) string { return h.peerURL(h.server.Addr()) }

// partitionFaults enables the blackholed-holder scenario.
type partitionFaults struct{ *harness }

func (h partitionFaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l := h.NewLocker(t)
	return l, h.proxies.Of(t, l)
}

// TestFaults runs the fault campaign on session advisory locks. A lock lives as long
// as its session: a killed holder's connection closes and frees the lock at once; a
// paused or blackholed holder's connection stays open on the server
// (idle_session_timeout is off by default), so its lock is never granted to another
// (peer+pgadvisory declares the pause and the partition not applicable) — the lock is
// unavailable instead. Those scenarios wait out the suite's bound once (the suite
// skips their other trials), so the holder scenarios and the partition run side by
// side.
func TestFaults(t *testing.T) {
	peertest.RunFaultsSideBySide(t,
		func(t *testing.T) conformance.Harness { return holderFaults{newHarness(t)} },
		func(t *testing.T) conformance.Harness { return partitionFaults{newHarness(t)} })
}
