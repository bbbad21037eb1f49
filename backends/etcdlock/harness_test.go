package etcdlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) {
	servers.EtcdMemberMain() // returns at once unless an EtcdCluster (TestFaults/cluster, TestConformanceCluster) started this process as a member
	conformance.ChildMain()
	os.Exit(servertest.Finish(m.Run()))
}

// harness gives the conformance suite Lockers on one etcd deployment, each with its
// own client connected through its own proxies (one per endpoint), so that Vanish can
// cut one client off the way a crash or a partition would.
type harness struct {
	name      string
	endpoints []string
	prefix    string

	mu      sync.Mutex
	proxies map[dlock.Locker][]*servers.Proxy
}

func newHarness(t testing.TB, endpoints []string) *harness {
	h := &harness{name: "etcd", endpoints: endpoints, prefix: "/dlock-test-" + randHex(4), proxies: map[dlock.Locker][]*servers.Proxy{}}
	h.admin(t, func(ctx context.Context, cli *clientv3.Client) {
		if _, err := cli.Get(ctx, h.prefix); err != nil {
			t.Fatalf("etcd: %v", err)
		}
	})
	return h
}

// admin runs f with a client of its own, closed before admin returns: a client kept
// for the whole run would open gRPC transports (a member's connection reset, a
// balancer's new pick) that the suite's goroutine-leak check cannot tell from leaks.
func (h *harness) admin(t testing.TB, f func(ctx context.Context, cli *clientv3.Client)) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: h.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f(ctx, cli)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newClient returns an etcd client closed when t ends.
func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	var eps []string
	var ps []*servers.Proxy
	for _, ep := range h.endpoints {
		p := servertest.Proxy(t, ep)
		ps = append(ps, p)
		eps = append(eps, p.Addr())
	}
	l := etcdlock.New(newClient(t, eps), etcdlock.WithPrefix(h.prefix))
	h.mu.Lock()
	h.proxies[l] = ps
	h.mu.Unlock()
	return l
}

func (h *harness) Capabilities() spec.Capabilities { return conformance.MustDeclare(h.url()) }

func (h *harness) Name() string { return h.name }

// url is the etcd:// URL of the harness's endpoints and prefix.
func (h *harness) url() string { return "etcd://" + strings.Join(h.endpoints, ",") + h.prefix }

// clusterHarness is a harness on a 3-member cluster.
func clusterHarness(t testing.TB, endpoints []string) *harness {
	h := newHarness(t, endpoints)
	h.name = "etcd (3-member cluster)"
	return h
}

var _ conformance.QueueInspector = (*harness)(nil) // etcd declares FIFO

// Waiting counts the keys queued behind the holder's.
func (h *harness) Waiting(t testing.TB, key string) int {
	var n int64
	h.admin(t, func(ctx context.Context, cli *clientv3.Client) {
		resp, err := cli.Get(ctx, etcdlock.QueueName(h.prefix, key)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatalf("Waiting(%q): %v", key, err)
		}
		n = resp.Count
	})
	return max(int(n)-1, 0)
}

// Vanish cuts the client's links: nothing is released or revoked, keep-alives stop
// reaching the server.
func (h *harness) Vanish(t testing.TB, l dlock.Locker) {
	h.mu.Lock()
	ps := h.proxies[l]
	h.mu.Unlock()
	if len(ps) == 0 {
		t.Fatalf("Vanish: not a Locker of this harness")
	}
	for _, p := range ps {
		p.Cut()
	}
}

// DeleteKey deletes every key of the lock's queue, as an operator would.
func (h *harness) DeleteKey(t testing.TB, key string) {
	h.admin(t, func(ctx context.Context, cli *clientv3.Client) {
		resp, err := cli.Delete(ctx, etcdlock.QueueName(h.prefix, key)+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatalf("DeleteKey(%q): %v", key, err)
		}
		if resp.Deleted == 0 {
			t.Fatalf("DeleteKey(%q): no lock key to delete", key)
		}
	})
}

func TestConformance(t *testing.T) {
	e := servertest.Etcd(t)
	conformance.Run(t, newHarness(t, e.Endpoints()))
}

// TestConformanceCluster runs the suite on a 3-member cluster whose members are
// processes of their own: their peer connections come and go, and in this process
// the suite's goroutine-leak check would take them for the clients' leaks.
func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, clusterHarness(t, servertest.EtcdCluster(t, 3).Endpoints()))
}
