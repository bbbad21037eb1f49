// Package conformance is the shared test suite every dlock backend passes: Run checks,
// on the backend's real servers, the properties a distributed lock promises — mutual
// exclusion, deadlock freedom, owner-only release, expiry, refresh, fencing and more —
// exactly as the backend's Capabilities declare them.
//
// A declared weakness is checked too, the other way round: the suite demands that the
// property is seen to fail, so that a backend whose documentation says "this breaks"
// keeps a test that shows it breaking. A surprise in either direction fails.
//
// Backend packages call Run from a TestConformance; users can run it against their own
// deployment the same way (or with `dlock check`).
package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Harness gives the suite clients of the backend under test.
type Harness interface {
	// NewLocker returns a new client of the backend under test, as independent of every
	// other client as another process would be. The suite closes it; the harness may
	// also register cleanups on t.
	NewLocker(t testing.TB) dlock.Locker
	// Capabilities says what the backend promises; the suite checks exactly that.
	Capabilities() Capabilities
}

// Property names one thing a lock may guarantee. Each is a named subtest of Run.
type Property string

// The properties Run checks, in order.
const (
	MutualExclusion  Property = "MutualExclusion"  // never two holders of one key at once
	DeadlockFreedom  Property = "DeadlockFreedom"  // a vanished holder's lock frees after its TTL, not before
	OwnerOnlyRelease Property = "OwnerOnlyRelease" // only the current owner can release or refresh
	Expiry           Property = "Expiry"           // an unrefreshed lease ends (Done) before anyone else is granted
	Refresh          Property = "Refresh"          // Refresh and WithAutoRenew keep a lease past its first TTL
	TryAcquire       Property = "TryAcquire"       // one attempt, ErrNotAcquired without waiting
	Cancellation     Property = "Cancellation"     // ctx ends a wait promptly and leaves no lock behind
	FencingMonotonic Property = "FencingMonotonic" // tokens strictly increase per key (or are all 0 without fencing)
	KeyIsolation     Property = "KeyIsolation"     // similar keys are different locks
	InputValidation  Property = "InputValidation"  // bad keys and TTLs are rejected; odd valid keys work and stay distinct
	Close            Property = "Close"            // ErrClosed afterwards; held leases end and free their locks
	ConcurrentUse    Property = "ConcurrentUse"    // one Locker from 64 goroutines (run under -race)
	DoneAndErr       Property = "DoneAndErr"       // Done closes on release, expiry and loss with the right Err
	FIFO             Property = "FIFO"             // with a queue: waiters are granted in arrival order, nobody jumps it
	NoGoroutineLeaks Property = "NoGoroutineLeaks" // nothing left running once every client is closed
)

// Properties lists every property in the order Run checks them.
var Properties = []Property{MutualExclusion, DeadlockFreedom, OwnerOnlyRelease, Expiry, Refresh,
	TryAcquire, Cancellation, FencingMonotonic, KeyIsolation, InputValidation, Close,
	ConcurrentUse, DoneAndErr, FIFO, NoGoroutineLeaks}

// Capabilities declares what a backend promises.
type Capabilities struct {
	// Fencing: Lease.Token strictly increases per key. Without it, tokens must be 0.
	Fencing bool
	// PerLeaseTTL: each lease has its own TTL (WithTTL). Without it, a lease lasts as
	// long as its client's session, and SessionTimeout says how long a vanished
	// client keeps its locks.
	PerLeaseTTL bool
	// SessionTimeout: for session-based backends, the longest a vanished client's
	// locks outlive it.
	SessionTimeout time.Duration
	// Refresh: Lease.Refresh extends the TTL. Without it, Refresh must return
	// errors.ErrUnsupported.
	Refresh bool
	// MinTTL: the shortest TTL the suite may use (it uses at least 250ms).
	MinTTL time.Duration
	// FIFO: the store queues waiting Acquires and grants the lock in arrival order; a
	// client that releases and asks again at once queues behind the waiters, and
	// TryAcquire fails while anyone waits. The suite checks it only with a harness that
	// implements QueueInspector. Without FIFO, the property is not applicable: a waiter
	// may be overtaken (barging).
	FIFO bool
	// Weaknesses: properties the backend is known not to guarantee. For each, the
	// suite demands that the violation reproduces.
	Weaknesses []Property
	// FaultOutcomes overrides what RunFaults expects of a scenario (by default every
	// guarantee holds, except that an unfenced resource sees a paused holder's
	// write): e.g. {ServerRestart: Violated} for Redis without persistence.
	FaultOutcomes map[Scenario]Status
	// FaultTrials raises the number of trials of a scenario above Trials(): for a
	// Sometimes outcome, enough that the violation is likely to show at least once.
	// It never lowers the number.
	FaultTrials map[Scenario]int
}

// Weak reports whether p is a declared weakness.
func (c Capabilities) Weak(p Property) bool { return slices.Contains(c.Weaknesses, p) }

// Vanisher is implemented by a harness that can make a client disappear the way a
// crashed process does: without releasing anything and without closing its session
// politely (e.g. by cutting its connections). Without it, the suite simulates a
// vanished holder of a per-lease-TTL backend by abandoning its lease.
type Vanisher interface {
	Vanish(t testing.TB, l dlock.Locker)
}

// QueueInspector is implemented by the harness of a backend that declares FIFO: it
// lets the suite see the store's queue, so that it can line waiters up in a known
// order.
type QueueInspector interface {
	// Waiting reports how many Acquires wait in the store's queue for key (the
	// holder not counted).
	Waiting(t testing.TB, key string) int
}

// KeyDeleter is implemented by a harness that can delete a lock behind its holder's
// back, as an operator (or a failover) would. It unlocks the checks that a refresh or
// release of a lock that is no longer ours is refused, and that auto-renewal reports
// the loss.
type KeyDeleter interface {
	DeleteKey(t testing.TB, key string)
}

// WeaknessReproducer is implemented by a harness whose declared weakness needs a
// backend-specific fault to show (a crash between two commands, a client with a
// skewed clock). For such a property the generic check must still hold, and the
// harness's scenario must show the violation.
type WeaknessReproducer interface {
	// ReproduceWeakness runs a scenario meant to violate p and returns what it saw
	// (each string one violation, with evidence). ok is false when the harness has no
	// scenario for p; the generic check then must show the violation itself.
	ReproduceWeakness(t *testing.T, p Property) (violations []string, ok bool)
}
