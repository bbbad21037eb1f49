// Package conformance is the shared test suite every dlock backend passes. Run checks,
// on the backend's real servers, the properties a distributed lock promises (package
// spec lists them: mutual exclusion, deadlock freedom, owner-only release, expiry,
// refresh, fencing and more) exactly as the backend declares them. RunFaults injects
// real faults — crashed and paused holders, restarts, failovers, partitions, quorum
// loss, leader kills, clock jumps — and checks what each does to the lock.
//
// A backend that declares semaphores, read-write locks, elections or sets of keys
// (spec.Capabilities.Semaphore, RWLock, Election, MultiKey) has their properties
// checked by Run too (spec.SemaphoreProperties, RWLockProperties,
// ElectionProperties, MultiKeyProperties), and their fault scenarios run by
// RunFaults (the mutex's, on the primitive: spec.SemaphoreScenarios,
// RWLockScenarios, ElectionScenarios).
//
// A declared weakness is checked too, the other way round: the suite demands that the
// property is seen to fail, so that a backend whose documentation says "this breaks"
// keeps a test that shows it breaking. A surprise in either direction fails.
//
// A backend package calls both from its tests with a Harness:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, harness{…}) }
//	func TestFaults(t *testing.T)      { conformance.RunFaults(t, harness{…}) }
//
// and takes the harness's Capabilities from its own declaration (MustDeclare).
// Users can run the suite against their own deployment the same way, or with
// `dlock check`.
//
// # Optional harness interfaces
//
// The more a harness can do to its backend, the more the suite checks. Each of these
// interfaces (harness.go) is found by type assertion:
//
//	interface          enables
//	Vanisher           DeadlockFreedom, DoneAndErr with a client that vanishes as a crashed process does
//	KeyDeleter         OwnerOnlyRelease, DoneAndErr with a lock deleted behind its holder's back (and the cause its Err names: Capabilities.DeletionSeen)
//	QueueInspector     FIFO (needs Capabilities.FIFO); WaiterCrash then sees its waiters queue
//	WeaknessReproducer declared weaknesses that need a fault of the harness's own
//	URLer              HolderCrash, WaiterCrash, HolderPause, HolderPauseFenced (holders and waiters in child processes: call ChildMain)
//	ServerRestarter    ServerRestart
//	Failoverer         Failover, FailoverFencing
//	Partitioner        Partition, StoreHang (with a Link per client)
//	NodeStopper        QuorumLoss
//	LeaderKiller       LeaderKill, LeaderKillLease
//	ClockJumper        ClockJump
//	NodeFaulter        ClockJumpBareMajority (Kleppmann's Redlock counterexample)
//	Diagnoser          the store's state in the evidence of a scenario that went wrong
//	FenceGuarder       HolderPauseFenced and FailoverFencedWrite with fencing guards (package fence) as the resource too: a cell per guard
//
// With $DLOCK_REPORT_DIR set, Run and RunFaults also write their results there as
// JSON, for `dlock-lab compare` to merge into one report.
package conformance

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Harness gives the suite clients of the backend under test.
type Harness interface {
	// NewLocker returns a new client of the backend under test, as independent of every
	// other client as another process would be. The suite closes it; the harness may
	// also register cleanups on t.
	NewLocker(t testing.TB) dlock.Locker
	// Capabilities says what the backend promises; the suite checks exactly that.
	Capabilities() spec.Capabilities
	// Name names the backend (and its configuration) in reports and logs, e.g.
	// "redis", "redis (cluster)", "peer+bsm". The conformance and the fault runs of
	// one configuration use one name: the report shows them as one row.
	Name() string
}

// MustDeclare returns what the backend registered for rawURL's scheme declares for
// rawURL (dlock.Declared), for a harness's Capabilities: the declaration that
// `dlock check` trusts is then the one the backend's own tests prove, and a harness
// adds only what depends on its servers (e.g. a Redis with appendfsync always keeps
// its locks across a restart). It panics when rawURL does not parse or has no
// declaration: a bug in the harness, not input.
func MustDeclare(rawURL string) spec.Capabilities {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("conformance.MustDeclare: %v", err))
	}
	c, err := dlock.Declared(u)
	if err != nil {
		panic(fmt.Sprintf("conformance.MustDeclare(%s): %v", u.Redacted(), err))
	}
	return c
}
