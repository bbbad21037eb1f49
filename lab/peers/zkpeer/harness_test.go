package zkpeer_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
	"github.com/dlock-go/dlock/lab/peers/zkpeer"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { peertest.Main(m) }

const (
	sessionTimeout = 2 * time.Second
	root           = "/dlock-peers"
)

// harness gives the suite clients of the shared ZooKeeper, each with its own session
// through its own proxy, so that one client can vanish.
type harness struct {
	z       *servers.ZooKeeper
	proxies servertest.Links[*servers.Proxy]
}

func newHarness(t *testing.T) *harness {
	return &harness{z: servertest.ZooKeeper(t)}
}

func (h *harness) NewLocker(t testing.TB) dlock.Locker {
	p := servertest.Proxy(t, h.z.Addr())
	l, err := zkpeer.New([]string{p.Addr()}, sessionTimeout, zkpeer.WithRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	h.proxies.Add(t, l, p)
	return l
}

// Capabilities: locks last as long as the session, no fencing exposed. Weak, as the
// library is: a client cut off from ZooKeeper hears of its session's expiry only when
// it reconnects, so its lease stays open after the server freed the lock for another
// (DeadlockFreedom, DoneAndErr); a cancelled wait stays queued until it gets the lock
// (Cancellation); keys are ZooKeeper paths taken as given (InputValidation,
// KeyIsolation).
func (h *harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare("peer+zk://" + strings.Join(h.z.Addrs(), ",") + "?session_timeout=" + sessionTimeout.String())
}

func (h *harness) Name() string { return "peer+zk" }

// Vanish cuts the client's link: its session expires on the server while the
// client, unable to reconnect, hears nothing. The link comes back before the
// client is closed, so that it learns of the expiry.
func (h *harness) Vanish(t testing.TB, l dlock.Locker) {
	p := h.proxies.Of(t, l)
	p.Cut()
	t.Cleanup(p.Restore)
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newHarness(t))
}
