package getlockpeer_test

import (
	"net/url"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/lab/peers/getlockpeer"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

// holderFaults enables the holder-process scenarios (crash, pause).
type holderFaults struct{ *harness }

func (h holderFaults) URL(t testing.TB) string {
	cfg, err := mysql.ParseDSN(h.m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	return getlockpeer.Scheme + "://" + url.UserPassword(cfg.User, cfg.Passwd).String() + "@" + cfg.Addr + "/"
}

// partitionFaults enables the blackholed-holder scenario.
type partitionFaults struct{ *harness }

func (h partitionFaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l := h.NewLocker(t)
	return l, h.proxies.Of(t, l)
}

// TestFaults runs the fault campaign on GET_LOCK. A lock lives as long as its
// connection: a killed holder's connection closes and frees the lock at once; a
// paused or blackholed holder's connection stays open on the server (idle, within
// wait_timeout: 8 hours by default), so its lock is never granted to another
// (peer+getlock declares the pauses held; Partition holds by default) — the lock is
// unavailable instead. Those scenarios wait out the suite's 10s bound once (the
// suite skips their other trials), so the holder scenarios and the partition run
// side by side.
func TestFaults(t *testing.T) {
	peertest.RunFaultsSideBySide(t,
		func(t *testing.T) conformance.Harness { return holderFaults{newHarness(t)} },
		func(t *testing.T) conformance.Harness { return partitionFaults{newHarness(t)} })
}
