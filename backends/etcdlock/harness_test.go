package etcdlock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
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
	// urlFor, when set, gives the URL of a Locker reaching the endpoints eps (the
	// client's proxies): NewLocker opens it. admin configures the harness's own
	// client (TLS, root's credentials).
	urlFor   func(eps []string) string
	adminCfg func(*clientv3.Config)

	proxies servertest.Links[servers.Proxies]
}

func newHarness(t testing.TB, endpoints []string) *harness { return newHarnessWith(t, endpoints, nil) }

// newHarnessWith is newHarness whose own client is configured by admin.
func newHarnessWith(t testing.TB, endpoints []string, admin func(*clientv3.Config)) *harness {
	h := &harness{name: "etcd", endpoints: endpoints, prefix: "/dlock-test-" + randHex(4), adminCfg: admin}
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
	cfg := clientv3.Config{Endpoints: h.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if h.adminCfg != nil {
		h.adminCfg(&cfg)
	}
	cli, err := clientv3.New(cfg)
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
	ps, eps := servertest.Proxies(t, h.endpoints)
	var l dlock.Locker
	if h.urlFor != nil {
		l = servertest.Open(t, h.urlFor(eps))
	} else {
		l = etcdlock.New(newClient(t, eps), etcdlock.WithPrefix(h.prefix), etcdlock.OwnClient())
	}
	h.proxies.Add(t, l, ps)
	return l
}

func (h *harness) Capabilities() spec.Capabilities { return conformance.MustDeclare(h.url()) }

func (h *harness) Name() string { return h.name }

// url is the etcd:// URL of the harness's endpoints and prefix.
func (h *harness) url() string {
	if h.urlFor != nil {
		return h.urlFor(h.endpoints)
	}
	return "etcd://" + strings.Join(h.endpoints, ",") + h.prefix
}

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
	h.proxies.Of(t, l).Cut()
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

// secretPassword is the lock user's password in the authentication tests: no
// message may show it.
const secretPassword = "S3CRET-etcd-pw"

// secureEtcd starts a member that serves TLS only and requires client
// certificates, with authentication enabled and a user "locker" (password
// secretPassword) whose role may read and write the keys under prefix and nothing
// else: what a lock user needs. It returns the member and its PKI.
func secureEtcd(t testing.TB, prefix string) (*servers.Etcd, *servers.PKI) {
	pki := servertest.PKI(t)
	e := servertest.NewEtcd(t, servers.EtcdOptions{TLS: pki})
	addLockUser(t, e, prefix)
	return e, pki
}

// addLockUser enables authentication on e and adds the user "locker" (password
// secretPassword) with read and write permission on the keys under prefix.
func addLockUser(t testing.TB, e *servers.Etcd, prefix string) {
	if err := e.EnableAuth(ctxFor(t, 30*time.Second), "r00t-pw"); err != nil {
		t.Fatal(err)
	}
	cli, err := e.Admin()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := ctxFor(t, 30*time.Second)
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "locker", secretPassword); return err },
		func() error { _, err := cli.RoleAdd(ctx, "locks"); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "locks", prefix+"/", clientv3.GetPrefixRangeEnd(prefix+"/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "locker", "locks"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConformanceTLSAuth runs the suite on Lockers opened from an etcd:// URL with a
// CA, a client certificate and key, a server name, and the user and password of a
// role that may use only the lock prefix — against a member that serves TLS only,
// requires client certificates and has authentication enabled.
func TestConformanceTLSAuth(t *testing.T) {
	prefix := "/dlock-secure-" + randHex(4)
	e, pki := secureEtcd(t, prefix)
	h := newHarnessWith(t, e.Endpoints(), func(c *clientv3.Config) {
		c.TLS, c.Username, c.Password = pki.ClientTLS(), "root", "r00t-pw"
	})
	h.name, h.prefix = "etcd (TLS, client certificates, authentication)", prefix
	h.urlFor = func(eps []string) string {
		return "etcd://locker:" + secretPassword + "@" + strings.Join(eps, ",") + h.prefix + "?" + pki.URLQuery()
	}
	conformance.Run(t, h)
}

// TestConformanceCluster runs the suite on a 3-member cluster whose members are
// processes of their own: their peer connections come and go, and in this process
// the suite's goroutine-leak check would take them for the clients' leaks.
func TestConformanceCluster(t *testing.T) {
	conformance.Run(t, clusterHarness(t, servertest.EtcdCluster(t, 3).Endpoints()))
}
