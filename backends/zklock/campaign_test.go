package zklock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// faultHarness adds the fault campaign's hooks to the conformance harness: the zk://
// URL for holder processes and a client whose links can be blackholed.
type faultHarness struct{ *harness }

func (h faultHarness) URL(t testing.TB) string {
	return fmt.Sprintf("zk://%s%s?session_timeout=%v", strings.Join(h.addrs, ","), h.root, h.timeout)
}

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
	e      *servers.ZKEnsemble
	killed **servers.ZooKeeper
}

// KillLeader brings back the node killed last time (with its data), so that every
// trial starts from three nodes, then kills the current leader.
func (h ensembleFaults) KillLeader(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if z := *h.killed; z != nil {
		if err := z.Restart(ctx, true); err != nil {
			t.Fatalf("restart the ZooKeeper node killed before: %v", err)
		}
		*h.killed = nil
	}
	z, err := h.e.KillLeader(ctx)
	if err != nil {
		t.Fatalf("kill the ZooKeeper leader: %v", err)
	}
	*h.killed = z
}

// TestFaults runs the fault campaign on ZooKeeper: holder crash and pause (child
// processes), a server restart with its data, a blackholed holder, and (unless
// -short) the leader kill of a 3-node ensemble under contention.
func TestFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		z := servertest.NewZooKeeper(t)
		h := newHarness(t, z.Addrs(), 2*time.Second)
		conformance.RunFaults(t, "zk", singleFaults{faultHarness{h}, z}, nil)
	})
	t.Run("ensemble", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node ensemble")
		}
		e := servertest.ZKEnsemble(t, 3)
		h := newHarness(t, e.Addrs(), 2*time.Second)
		conformance.RunFaults(t, "zk (3-node ensemble)", ensembleFaults{h, e, new(*servers.ZooKeeper)}, nil)
	})
}
