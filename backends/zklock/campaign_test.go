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

// TestFaults runs the fault campaign on ZooKeeper: holder crash and pause (child
// processes), a server restart with its data, and a blackholed holder. The leader
// kill of a 3-node ensemble under contention is TestEnsemble/LeaderKill: every extra
// leader kill here means more reconnects, and go-zookeeper v1.0.4 has a data race
// between its reconnect's SetWatches and its receive loop that -race reports.
func TestFaults(t *testing.T) {
	z := servertest.NewZooKeeper(t)
	h := newHarness(t, z.Addrs(), 2*time.Second)
	conformance.RunFaults(t, "zk", singleFaults{faultHarness{h}, z}, nil)
}
