package zklock_test

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

// tick is the tickTime of the servers internal/servers starts.
const tick = 200 * time.Millisecond

// fastReaping: the servers started by this binary reap empty containers every 200ms.
var fastReaping bool

func TestMain(m *testing.M) {
	conformance.ChildMain()
	// ZooKeeper reaps empty container nodes every minute by default; the servers this
	// test binary starts inherit this and reap every 200ms (TestEmptyDirectoriesGo).
	// Benchmarks keep the default, as a deployment would.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Setenv("JAVA_TOOL_OPTIONS", strings.TrimSpace(os.Getenv("JAVA_TOOL_OPTIONS")+" -Dznode.container.checkIntervalMs=200"))
		fastReaping = true
	}
	code := m.Run()
	os.Exit(servertest.Finish(code))
}

// ctxFor returns a context that ends after d or when t ends.
var ctxFor = locktest.Ctx

// connect opens a raw go-zookeeper connection (no proxy) and waits for its session.
func connect(t testing.TB, addrs []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	return connectAs(t, addrs, timeout, nil, "")
}

// connectAs is connect over TLS (tc not nil) and authenticated with the digest
// credentials auth ("user:password", "" for none).
func connectAs(t testing.TB, addrs []string, timeout time.Duration, tc *tls.Config, auth string) *zk.Conn {
	t.Helper()
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		if tc != nil {
			return tls.DialWithDialer(&net.Dialer{Timeout: d}, network, addr, tc)
		}
		return net.DialTimeout(network, addr, d)
	}
	conn, events, err := zk.Connect(addrs, timeout, zk.WithLogger(quiet{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		t.Cleanup(conn.Close)
		waitHasSession(t, events, addrs)
		if err := conn.AddAuth("digest", []byte(auth)); err != nil {
			t.Fatalf("AddAuth: %v", err)
		}
		return conn
	}
	t.Cleanup(conn.Close)
	waitHasSession(t, events, addrs)
	return conn
}

func waitHasSession(t testing.TB, events <-chan zk.Event, addrs []string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e := <-events:
			if e.State == zk.StateHasSession {
				return
			}
		case <-deadline:
			t.Fatalf("no ZooKeeper session with %v", addrs)
		}
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// harness gives the suite clients that each reach the servers through their own
// proxies, so that Vanish can cut one client off the way a crash does: the
// connection drops without a polite close, and the ensemble expires the session
// one timeout later.
type harness struct {
	name    string
	addrs   []string
	root    string
	timeout time.Duration
	admin   *zk.Conn
	// userinfo ("user:password@") and query (more parameters) go into the clients'
	// URLs.
	userinfo, query string

	proxies servertest.Links[servers.Proxies]
}

func newHarness(t testing.TB, addrs []string, timeout time.Duration) *harness {
	return &harness{name: "zk", addrs: addrs, root: "/dlock-test", timeout: timeout,
		admin: connect(t, addrs, 10*time.Second)}
}

// open returns a Locker through fresh proxies, closed when t ends.
func (h *harness) open(t testing.TB) (dlock.Locker, servers.Proxies) {
	t.Helper()
	ps, hosts := servertest.Proxies(t, h.addrs)
	u := h.url(hosts)
	l, err := dlock.Open(ctxFor(t, 30*time.Second), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() }) // idempotent: the suite closes its clients too
	h.proxies.Add(t, l, ps)
	return l, ps
}

// url is the zk:// URL of the harness's root and session timeout on hosts.
// A harness with timeout 0 opens URLs without session_timeout: the default.
func (h *harness) url(hosts []string) string {
	var q []string
	if h.timeout > 0 {
		q = append(q, "session_timeout="+h.timeout.String())
	}
	if h.query != "" {
		q = append(q, h.query)
	}
	u := fmt.Sprintf("zk://%s%s%s", h.userinfo, strings.Join(hosts, ","), h.root)
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

func (h *harness) Name() string { return h.name }

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	l, _ := h.open(t)
	return l
}

func (h *harness) Capabilities() spec.Capabilities {
	// A vanished client's session ends one timeout after the ensemble last heard
	// from it, rounded up to the next tick.
	c := conformance.MustDeclare(h.url(h.addrs))
	c.SessionTimeout += 2 * tick
	return c
}

var _ conformance.QueueInspector = (*harness)(nil) // zk declares FIFO

// Waiting counts the lock nodes queued behind the holder's.
func (h *harness) Waiting(t testing.TB, key string) int {
	children, _, err := h.admin.Children(zklock.LockDir(h.root, key))
	if errors.Is(err, zk.ErrNoNode) {
		return 0
	}
	if err != nil {
		t.Fatalf("Children(%s): %v", zklock.LockDir(h.root, key), err)
	}
	return max(len(children)-1, 0)
}

// Vanish cuts every link of l: its connections drop and new ones are refused.
func (h *harness) Vanish(t testing.TB, l dlock.Locker) {
	h.proxies.Of(t, l).Cut()
}

// DeleteKey deletes every node in key's lock directory, as an operator would. It
// syncs first: the admin session may be served by an ensemble member that has not
// yet applied the holder's create (ZooKeeper reads are not linearizable across
// sessions), and would then find the directory empty.
func (h *harness) DeleteKey(t testing.TB, key string) {
	dir := zklock.LockDir(h.root, key)
	if _, err := h.admin.Sync(dir); err != nil {
		t.Fatalf("DeleteKey(%q): sync: %v", key, err)
	}
	children, _, err := h.admin.Children(dir)
	if err != nil {
		t.Fatalf("DeleteKey(%q): %v", key, err)
	}
	if len(children) == 0 {
		t.Fatalf("DeleteKey(%q): no lock node in %s", key, dir)
	}
	for _, c := range children {
		if err := h.admin.Delete(dir+"/"+c, -1); err != nil {
			t.Fatalf("DeleteKey(%q): %v", key, err)
		}
	}
}

func TestConformance(t *testing.T) {
	z := servertest.ZooKeeper(t)
	conformance.Run(t, newHarness(t, z.Addrs(), 2*time.Second))
}

// secretPassword is the digest password of the lock user in the TLS and ACL tests:
// no message may show it.
const secretPassword = "S3CRET-zk-pw"

// TestConformanceTLSAuth runs the suite on Lockers opened from a zk:// URL with a
// digest user and password (so the lock nodes carry a creator-only ACL) and a CA,
// a client certificate and key and a server name, against a server whose client
// port speaks TLS only and requires client certificates.
func TestConformanceTLSAuth(t *testing.T) {
	pki := servertest.PKI(t)
	z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{TLS: pki})
	h := &harness{name: "zk (TLS, digest ACL)", addrs: z.Addrs(), root: "/dlock-secure", timeout: 2 * time.Second,
		admin:    connectAs(t, z.Addrs(), 10*time.Second, pki.ClientTLS(), "locker:"+secretPassword),
		userinfo: "locker:" + secretPassword + "@", query: pki.URLQuery()}
	conformance.Run(t, h)
}

// TestConformanceEnsemble runs the suite on a 3-node ensemble (the leader kill is
// TestFaults/ensemble).
func TestConformanceEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node ensemble")
	}
	e := servertest.ZKEnsemble(t, 3)
	h := newHarness(t, e.Addrs(), 2*time.Second)
	h.name = "zk (3-node ensemble)"
	conformance.Run(t, h)
}
