package memlock_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness gives the suite clients that share one private Store, as processes share
// one server.
type harness struct{ store *memlock.Store }

func (h harness) NewLocker(t testing.TB) dlock.Locker {
	return memlock.New(memlock.WithStore(h.store))
}

func (h harness) Capabilities() spec.Capabilities { return conformance.MustDeclare("mem://") }

func (h harness) Name() string { return "mem" }

var _ conformance.QueueInspector = harness{} // memlock declares FIFO

func (h harness) Waiting(t testing.TB, key string) int { return h.store.Waiting(key) }

func (h harness) DeleteKey(t testing.TB, key string) {
	if !h.store.Delete(key) {
		t.Fatalf("Delete(%q): no live lock to delete", key)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness{memlock.NewStore()})
}
