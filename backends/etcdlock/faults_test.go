package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/fencetest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// faultHarness adds the fault campaign's hooks to the conformance harness: the
// etcd:// URL for holder processes, a client whose link can be blackholed, a restart
// of the (private, embedded) member with its data, or the leader kill of a cluster.
type faultHarness struct {
	*harness
	member *servers.Etcd // restarted by RestartServers
}

func (h *faultHarness) URL(t testing.TB) string { return h.url() }

func (h *faultHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, conformance.Link) {
	l := h.NewLocker(t)
	return l, h.proxies.Of(t, l)
}

// singleFaults is a one-member deployment: restart applies.
type singleFaults struct{ *faultHarness }

func (h singleFaults) RestartServers(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.member.Restart(ctx, true); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
}

// guardedFaults runs HolderPauseFenced with every fencing guard as the resource
// too, on servers of their own (fencetest.Guards): a cell per guard.
type guardedFaults struct{ singleFaults }

func (guardedFaults) FenceGuards(t testing.TB) []conformance.FenceGuard { return fencetest.Guards(t) }

// clusterFaults is a 3-member cluster: the leader kill under contention.
type clusterFaults struct {
	*harness
	kill func(testing.TB)
}

func (h clusterFaults) KillLeader(t testing.TB) { h.kill(t) }

// TestFaults runs the fault campaign on etcd: on one member, holder crash and pause
// (child processes; the paused holder refused by every fencing guard too), a member restart with its data, and a blackholed holder; on a
// 3-member cluster of member processes, the leader kill (SIGKILL) under contention
// (every trial starts from three members: the one killed before comes back first).
func TestFaults(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		e := servertest.NewEtcd(t, servers.EtcdOptions{})
		h := &faultHarness{harness: newHarness(t, e.Endpoints()), member: e}
		conformance.RunFaults(t, guardedFaults{singleFaults{h}})
	})
	t.Run("cluster", func(t *testing.T) {
		c := servertest.EtcdCluster(t, 3) // a process per member: the kill is a real SIGKILL
		conformance.RunFaults(t, clusterFaults{clusterHarness(t, c.Endpoints()), servertest.LeaderKills(c.KillLeader)})
	})
}
