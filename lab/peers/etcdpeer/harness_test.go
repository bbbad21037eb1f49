package etcdpeer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/etcdpeer"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { peertest.Main(m) }

const sessionTTL = 2 // seconds, etcd's minimum with default server timing

// harness gives the suite clients of the shared etcd, each with its own connection
// and session, as separate processes would have.
type harness struct{ e *servers.Etcd }

func (h harness) client(t testing.TB) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: h.e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	if strings.HasSuffix(t.Name(), "/"+string(spec.ConcurrentUse)) {
		// The violation is real (TestOneSessionGrantsTwice shows it every time), but
		// the suite's check sees it only when two goroutines happen to be inside at
		// once (about 1 run in 15), so it can be neither a guarantee nor a declared
		// weakness of this peer.
		t.Skip("one session holds a lock for all its goroutines at once: see TestOneSessionGrantsTwice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := etcdpeer.New(ctx, h.client(t), etcdpeer.WithSessionTTL(sessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Capabilities: locks last as long as the session; the grant's revision fences.
// Weak, as the library is: a key is a prefix that nested keys share
// (InputValidation), and Unlock does not tell a holder that its lock had been deleted
// (OwnerOnlyRelease). ConcurrentUse is violated too (one session holds a lock for
// all its goroutines at once), shown by TestOneSessionGrantsTwice.
func (h harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare(fmt.Sprintf("peer+etcd://%s?session_ttl=%d", h.e.Addr(), sessionTTL))
}

func (h harness) Name() string { return "peer+etcd" }

// Vanish stops the session's keep-alive without revoking its lease, as a crash does.
func (h harness) Vanish(t testing.TB, l dlock.Locker) {
	l.(interface{ Session() *concurrency.Session }).Session().Orphan()
}

// DeleteKey deletes every waiter's key of the lock, as an operator would.
var _ conformance.QueueInspector = harness{} // peer+etcd declares FIFO

// Waiting counts the Mutex keys queued behind the holder's (under key + "/").
func (h harness) Waiting(t testing.TB, key string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: h.e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close() // one per call: the suite polls, and checks for leaks afterwards
	resp, err := cli.Get(ctx, key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("Waiting(%q): %v", key, err)
	}
	return max(int(resp.Count)-1, 0)
}

func (h harness) DeleteKey(t testing.TB, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.client(t).Delete(ctx, key+"/", clientv3.WithPrefix())
	if err != nil || resp.Deleted == 0 {
		t.Fatalf("delete %q/: %v deleted, %v", key, resp, err)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{servertest.Etcd(t)})
}

// TestOneSessionGrantsTwice shows that concurrency.Mutex is held by the session, not

// by the caller: a second Acquire of a held key through the same Locker is granted at

// once, while another Locker (another session) is refused.
