package getlockpeer_test

import (
	"net/url"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/peers/getlockpeer"
)

// faultCaps is what GET_LOCK does under the fault scenarios: a lock lives as long as
// its connection. A killed holder's connection closes and frees the lock at once; a
// paused holder's connection stays open (idle, within wait_timeout: 8 hours by
// default), so the lock is never granted to another while it sleeps (HolderPause and
// HolderPauseFenced hold, at the price of the lock being unavailable); a blackholed
// holder's connection stays open on the server too (Partition holds the same way).
func faultCaps(h *harness) conformance.Capabilities {
	c := h.Capabilities()
	c.FaultOutcomes = map[conformance.Scenario]conformance.Status{
		conformance.HolderPause:       conformance.Held,
		conformance.HolderPauseFenced: conformance.Held,
	}
	return c
}

// holderFaults enables the holder-process scenarios (crash, pause).
type holderFaults struct{ *harness }

func (h holderFaults) Capabilities() conformance.Capabilities { return faultCaps(h.harness) }

func (h holderFaults) URL(t testing.TB) string {
	cfg, err := mysql.ParseDSN(h.m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	return getlockpeer.Scheme + "://" + url.UserPassword(cfg.User, cfg.Passwd).String() + "@" + cfg.Addr + "/"
}

// partitionFaults enables the blackholed-holder scenario.
type partitionFaults struct{ *harness }

func (h partitionFaults) Capabilities() conformance.Capabilities { return faultCaps(h.harness) }

func (h partitionFaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l := h.NewLocker(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	return l, h.proxies[l]
}

// TestFaults runs the fault campaign on GET_LOCK. The scenarios in which the lock is
// (rightly) never freed each wait out the suite's 10s bound per trial, so the holder
// scenarios and the partition run side by side.
func TestFaults(t *testing.T) {
	t.Run("holders", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, "peer GET_LOCK", holderFaults{newHarness(t)}, nil)
	})
	t.Run("partition", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, "peer GET_LOCK", partitionFaults{newHarness(t)}, nil)
	})
}
