package etcdlock_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func TestMain(m *testing.M) {
	conformance.ChildMain()
	if os.Getenv(clusterChildEnv) == "1" {
		serveCluster()
		return
	}
	code := m.Run()
	// A member killed abruptly (TestLeaderKilledDuringContention) can leave the
	// embedded server's own request handlers blocked on its closed storage:
	// etcd's goroutines, not ours.
	os.Exit(servertest.Finish(code, goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/storage/backend.(*baseReadTx).UnsafeRange")))
}

// harness gives the conformance suite Lockers on one etcd deployment, each with its
// own client connected through its own proxies (one per endpoint), so that Vanish can
// cut one client off the way a crash or a partition would.
type harness struct {
	endpoints []string
	prefix    string

	mu      sync.Mutex
	proxies map[dlock.Locker][]*servers.Proxy
}

func newHarness(t testing.TB, endpoints []string) *harness {
	h := &harness{endpoints: endpoints, prefix: "/dlock-test-" + randHex(4), proxies: map[dlock.Locker][]*servers.Proxy{}}
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

func (h *harness) Capabilities() conformance.Capabilities {
	return conformance.MustDeclare("etcd://")
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

// TestConformanceCluster runs the suite on a 3-member cluster that lives in a child
// process: the members' own peer connections come and go, and in this process the
// suite's goroutine-leak check would take them for the clients' leaks.
func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, newHarness(t, clusterInChild(t)))
}

const clusterChildEnv = "ETCDLOCK_TEST_CLUSTER_CHILD"

// clusterInChild starts this test binary again as a process that runs a 3-member
// etcd cluster until its stdin closes, and returns the members' endpoints.
func clusterInChild(t *testing.T) []string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clusterChildEnv+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("cluster process: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "endpoints ") {
		t.Fatalf("cluster process: %q %v", line, err)
	}
	return strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "endpoints ")), ",")
}

// serveCluster is the child process of clusterInChild.
func serveCluster() {
	ctx, cancel := context.WithTimeout(context.Background(), servers.DefaultStartTimeout)
	c, err := servers.StartEtcdCluster(ctx, 3)
	cancel()
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("endpoints %s\n", strings.Join(c.Endpoints(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it (or dies)
	err = c.Close()
	servers.Shutdown()
	if err != nil {
		os.Exit(1)
	}
}
