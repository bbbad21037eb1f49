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
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
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

// ensembleFaults is a 3-node ensemble; only the leader kill runs there.
type ensembleFaults struct {
	*harness
	kill func(testing.TB)
	e    *servers.ZKEnsemble
}

func (h ensembleFaults) KillLeader(t testing.TB) { h.kill(t) }

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
// processes), a server restart with its data, and a blackholed holder on one
// server; the leader kill of a 3-node ensemble under contention (every trial starts
// from three nodes). The ensemble part does not run under the race detector:
// go-zookeeper v1.0.4 reads its last zxid in the reconnect's SetWatches while the
// receive loop writes it, a race in the library (reported upstream as
// samuel/go-zookeeper#260; the fix go-zookeeper/zk#35 is not merged) that every
// leader kill risks tripping. "make test" runs it again without -race, so CI runs it either way.
func TestFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		z := servertest.NewZooKeeper(t)
		h := newHarness(t, z.Addrs(), 2*time.Second)
		conformance.RunFaults(t, singleFaults{faultHarness{h}, z})
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
