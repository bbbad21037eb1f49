package redsyncpeer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
	"github.com/dlock-go/dlock/lab/peers/redsyncpeer"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { peertest.Main(m) }

// harness gives the suite clients of the same masters, each with its own connections.
type harness struct{ masters []*servers.Redis }

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	clients := make([]redis.UniversalClient, len(h.masters))
	for i, m := range h.masters {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return redsyncpeer.New(clients)
}

// Capabilities: owner-checked release and extend by a random value, a per-lock TTL,
// no fencing. The suite's TTLs start at 300ms: redsync gives each master 5% of the TTL
// to answer (15ms at 300ms), and shorter budgets fail on a loaded -race machine.
func (h harness) Capabilities() spec.Capabilities {
	return conformance.MustDeclare("peer+redsync://" + strings.Join(h.addrs(), ","))
}

func (h harness) addrs() []string {
	a := make([]string, len(h.masters))
	for i, m := range h.masters {
		a[i] = m.Addr()
	}
	return a
}

func (h harness) name() string {
	if len(h.masters) == 1 {
		return "peer+redsync (1 master)"
	}
	return fmt.Sprintf("peer+redsync (%d masters)", len(h.masters))
}

func (h harness) Name() string { return h.name() }

// DeleteKey deletes the lock on every master, as an operator (or a failover) would.
func (h harness) DeleteKey(t testing.TB, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range h.masters {
		if n, err := m.Do(ctx, "DEL", key); err != nil || n != "1" {
			t.Fatalf("DEL %q on %s: %q, %v", key, m.Addr(), n, err)
		}
	}
}

func TestConformance(t *testing.T) {
	t.Run("1master", func(t *testing.T) {
		conformance.Run(t, harness{[]*servers.Redis{servertest.Redis(t)}})
	})
	t.Run("5masters", func(t *testing.T) {
		conformance.Run(t, harness{servertest.RedisMasters(t, 5)})
	})
}
