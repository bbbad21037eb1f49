package zklock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// faultHarness adds the fault campaign's hooks to the conformance harness: the zk://
// URL for holder processes and a client whose links can be blackholed.
type faultHarness struct{ *harness }

func (h faultHarness) URL(t testing.TB) string { return h.url(h.addrs) }

func (h faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l, ps := h.open(t)
	return l, servers.Proxies(ps)
}

// singleFaults is one private server, restarted with its data by RestartServers.
type singleFaults struct {
	faultHarness
	z *servers.ZooKeeper
}

func (h singleFaults) RestartServers(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.z.Restart(ctx, true); err != nil {
		t.Fatalf("restart ZooKeeper: %v", err)
	}
}

// guardedFaults runs HolderPauseFenced with every fencing guard as the resource
// too, on servers of their own (fencetest.Guards): a cell per guard.
type guardedFaults struct{ singleFaults }

func (guardedFaults) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

// defaultFaults runs what depends on the session timeout: a restart, a cut-off and a
// hung holder.
type defaultFaults struct{ s singleFaults }

func (h defaultFaults) Name() string                        { return h.s.Name() }
func (h defaultFaults) NewLocker(t testing.TB) dlock.Locker { return h.s.NewLocker(t) }
func (h defaultFaults) Capabilities() spec.Capabilities     { return h.s.Capabilities() }
func (h defaultFaults) RestartServers(t testing.TB)         { h.s.RestartServers(t) }
func (h defaultFaults) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	return h.s.NewPartitionedLocker(t)
}

// ensembleFaults is a 3-node ensemble; only the leader kill runs there.
type ensembleFaults struct {
	*harness
	kill func(testing.TB)
	e    *servers.ZKEnsemble
}

func (h ensembleFaults) KillLeader(t testing.TB) { h.kill(t) }

// Capabilities: what zk declares, and what depends on these servers: a leader kill
// leaves every client without a connection while the ensemble elects (about a second
// at tickTime 200ms), longer than a third of the 2s session timeout after which a
// client gives its leases up, so a lease held across the kill ends (LeaderKillLease).
func (h ensembleFaults) Capabilities() spec.Capabilities {
	c := h.harness.Capabilities()
	if c.FaultOutcomes == nil {
		c.FaultOutcomes = map[spec.Scenario]spec.Status{}
	}
	c.FaultOutcomes[spec.LeaderKillLease] = spec.Violated
	return c
}

// Diagnose lists key's lock nodes with their owning sessions, and each member's
// mode and sessions (the 4lw "srvr" and "dump").
func (h ensembleFaults) Diagnose(t testing.TB, key string) string {
	var b strings.Builder
	dir := zklock.LockDir(h.root, key)
	kids, _, err := h.admin.Children(dir)
	fmt.Fprintf(&b, "admin session %#x %v; %s: %v %v;", h.admin.SessionID(), h.admin.State(), dir, len(kids), err)
	for _, k := range kids {
		_, st, err := h.admin.Get(dir + "/" + k)
		if err == nil {
			fmt.Fprintf(&b, " %s owner %#x czxid %#x;", k, st.EphemeralOwner, st.Czxid)
		}
	}
	for _, z := range h.e.Nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		mode, merr := z.Mode(ctx)
		dump, _ := z.FourLetter(ctx, "dump")
		if mode == "leader" {
			mntr, _ := z.FourLetter(ctx, "mntr")
			dump += "\n" + mntr
		}
		cancel()
		fmt.Fprintf(&b, " node %s: %s %v %q;", z.Addr(), mode, merr, dump)
	}
	return b.String()
}

// TestFaults runs the fault campaign on ZooKeeper: holder crash and pause (child
// processes; the paused holder refused by every fencing guard too), a server
// restart with its data, and a blackholed holder on one server; the leader kill of a 3-node ensemble under contention (every trial starts
// from three nodes). The ensemble part does not run under the race detector:
// go-zookeeper v1.0.4 reads its last zxid in the reconnect's SetWatches while the
// receive loop writes it, a race in the library (reported upstream as
// samuel/go-zookeeper#260; the fix go-zookeeper/zk#35 is not merged) that every
// leader kill risks tripping. "make test" runs it again without -race, so CI runs it either way.
func TestFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{})
		h := newHarness(t, z.Addrs(), 2*time.Second)
		conformance.RunFaults(t, guardedFaults{singleFaults{faultHarness{h}, z}})
	})
	t.Run("defaults", func(t *testing.T) {
		// The same server with the URL's defaults (session_timeout 10s), for what
		// depends on the timeout: a cut-off or hung holder, a restart.
		z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{})
		h := newHarness(t, z.Addrs(), 0)
		h.name = "zk (default session_timeout)"
		conformance.RunFaults(t, defaultFaults{singleFaults{faultHarness{h}, z}})
	})
	t.Run("ensemble", func(t *testing.T) {
		if raceEnabled {
			t.Skip("go-zookeeper v1.0.4 races on reconnect (see TestFaults); run without -race: go test -run TestFaults/ensemble ./backends/zklock")
		}
		e := servertest.ZKEnsemble(t, 3)
		h := newHarness(t, e.Addrs(), 2*time.Second)
		h.name = "zk (3-node ensemble)"
		conformance.RunFaults(t, ensembleFaults{h, servertest.LeaderKills(e.KillLeader), e})
	})
}
