// Package spec is the vocabulary in which a backend declares what it guarantees: the
// properties of a lock (Property), the faults the suite injects (Scenario), their
// outcomes (Status) and one backend's declaration (Capabilities).
//
// A backend package declares itself next to its URL opener (dlock.Register with a
// Declare function). The conformance suite checks exactly what is declared —
// guarantees must hold, declared weaknesses must reproduce — and `dlock check` and the
// report read the same declaration, so a backend's documentation, its tests and the
// tool users run against their own servers cannot disagree.
//
// The package has no dependencies: importing it costs a backend nothing at run time.
package spec

import (
	"slices"
	"time"
)

// Property names one thing a lock may guarantee. Each is a named subtest of
// conformance.Run.
type Property string

// The properties conformance.Run checks, in order.
const (
	MutualExclusion  Property = "MutualExclusion"  // never two holders of one key at once
	DeadlockFreedom  Property = "DeadlockFreedom"  // a vanished holder's lock frees after its TTL, not before
	OwnerOnlyRelease Property = "OwnerOnlyRelease" // only the current owner can release or refresh
	Expiry           Property = "Expiry"           // an unrefreshed lease ends (Done) before anyone else is granted
	Refresh          Property = "Refresh"          // Refresh and WithAutoRenew keep a lease past its first TTL
	TryAcquire       Property = "TryAcquire"       // one attempt, ErrNotAcquired without waiting
	SimultaneousTry  Property = "SimultaneousTry"  // clients that TryAcquire a free key at one moment: exactly one wins; none while it is held
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

// Properties lists every property in the order conformance.Run checks them.
var Properties = []Property{MutualExclusion, DeadlockFreedom, OwnerOnlyRelease, Expiry, Refresh,
	TryAcquire, SimultaneousTry, Cancellation, FencingMonotonic, KeyIsolation, InputValidation, Close,
	ConcurrentUse, DoneAndErr, FIFO, NoGoroutineLeaks}

// PrimitiveProperties lists the properties of the primitives beyond the mutex
// (semaphores, read-write locks, elections, multi-key locks), which conformance.Run
// checks where a backend declares the primitive (listed in primitives.go's init).
var PrimitiveProperties []Property

// PrimitiveScenarios lists the fault scenarios of the primitives beyond the mutex
// (each mirrors a mutex scenario: MutexScenarioOf; listed in primitives.go's init).
var PrimitiveScenarios []Scenario

// Scenario names a fault that conformance.RunFaults injects.
type Scenario string

// The fault scenarios, each enabled by an optional interface of the test harness
// (named in brackets; see package conformance).
const (
	HolderCrash       Scenario = "HolderCrash"       // [URLer] the holder process gets SIGKILL
	WaiterCrash       Scenario = "WaiterCrash"       // [URLer] a waiting process gets SIGKILL: the waiters behind it are still served
	HolderPause       Scenario = "HolderPause"       // [URLer] the holder is SIGSTOPped past its TTL, then writes (unfenced resource)
	HolderPauseFenced Scenario = "HolderPauseFenced" // the same, against a resource that checks fencing tokens
	ServerRestart     Scenario = "ServerRestart"     // [ServerRestarter] every server restarts while a lock is held
	Failover          Scenario = "Failover"          // [Failoverer] a lagging replica is promoted while a lock is held
	Partition         Scenario = "Partition"         // [Partitioner] the holder's link is blackholed
	StoreHang         Scenario = "StoreHang"         // [Partitioner] the store stops answering a renewed lease's client: its Release, Close and Done stay bounded
	QuorumLoss        Scenario = "QuorumLoss"        // [NodeStopper] a minority, then a majority of nodes stop
	LeaderKill        Scenario = "LeaderKill"        // [LeaderKiller] the cluster leader dies under contention (no overlap; tokens keep increasing)
	LeaderKillLease   Scenario = "LeaderKillLease"   // [LeaderKiller] the other fact of LeaderKill: a lease held across the kill is kept (held), or ends with Done (violated)
	ClockJump         Scenario = "ClockJump"         // [ClockJumper] the server's clock jumps forward
	// [NodeFaulter] Kleppmann's Redlock counterexample: a lease granted on a bare
	// majority (two of five masters unreachable), then one of the three jumps its clock
	// past the TTL, and another client asks.
	ClockJumpBareMajority Scenario = "ClockJumpBareMajority"
	// [Failoverer] consecutive grants across an asynchronous failover get strictly
	// increasing fencing tokens (the property threatened: FencingMonotonic).
	FailoverFencing Scenario = "FailoverFencing"
	// [Failoverer] the other fact of FailoverFencing: the holders on both sides of the
	// failover write through a fenced resource, which must refuse a token handed out
	// twice (the property threatened: the resource's safety).
	FailoverFencedWrite Scenario = "FailoverFencedWrite"
)

// Scenarios lists every scenario in the order conformance.RunFaults runs them.
var Scenarios = []Scenario{HolderCrash, WaiterCrash, HolderPause, HolderPauseFenced, ServerRestart, Failover, FailoverFencing,
	FailoverFencedWrite, Partition, StoreHang, QuorumLoss, LeaderKill, LeaderKillLease, ClockJump, ClockJumpBareMajority}

// Status is the outcome of one property under one scenario on one backend, or what
// a declaration expects it to be.
type Status string

// The outcomes. Sometimes is only ever expected, never observed.
const (
	Held          Status = "held"           // checked in every trial, never violated
	Violated      Status = "violated"       // violated in at least one trial (evidence attached)
	Unavailable   Status = "unavailable"    // the lock service could not answer
	NotApplicable Status = "not applicable" // the scenario does not apply to the backend

	// NotExercised: every trial ran, but none did what the scenario needs to show
	// anything (its fault took no effect while it mattered: no lease held when the
	// server restarted, no grant before a failover). Never counted as held.
	NotExercised Status = "not exercised"

	// Sometimes is an expectation, never an outcome: a timing-dependent weakness that
	// shows in some trials and not in others (e.g. a client library that learns of
	// its lost lease a moment after the server frees it). Held and Violated both
	// agree with it; Capabilities.FaultTrials should then ask for enough trials that
	// the violation is likely to show.
	Sometimes Status = "sometimes"
)

// Capabilities is one backend's declaration: what a Locker opened from one URL (or
// built by one constructor with one set of options) promises.
//
// Not declared here: what depends on the servers rather than the client — whether
// Redis persists every write (appendfsync always), how far a ZooKeeper ensemble
// stretches a requested session timeout. A harness that knows its servers adjusts
// the declaration it hands the suite.
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
	// MinTTL: the shortest TTL the backend honours (the suite uses at least 250ms).
	MinTTL time.Duration
	// DeletionSeen: how a holder learns that its lock was deleted behind its back (by
	// an operator, as the suite's KeyDeleter does). The conformance suite checks that
	// the lost lease's Err names the cause it implies (DoneAndErr).
	DeletionSeen DeletionSeen
	// FIFO: the store queues waiting Acquires and grants the lock in arrival order; a
	// client that releases and asks again at once queues behind the waiters, and
	// TryAcquire fails while anyone waits. Without FIFO a waiter may be overtaken
	// (barging), and the property is not applicable.
	FIFO bool
	// Weaknesses: properties the backend is known not to guarantee. For each, the
	// suite demands that the violation reproduces.
	Weaknesses []Property
	// HarnessOnly lists the Weaknesses that show only under a fault the backend's own
	// test harness injects (a crash between two commands, a client whose clock runs
	// ahead, a lock deleted behind its holder's back, a client cut off the network).
	// A run without that harness (`dlock check`) checks them as guarantees.
	HarnessOnly []Property
	// SometimesWeak: properties the backend violates in some runs and not in others
	// (a race the check's trials may or may not hit). Both outcomes agree with the
	// declaration; the report says which one this run saw.
	SometimesWeak []Property
	// FaultOutcomes overrides what a scenario is expected to show (by default every
	// guarantee holds, except that an unfenced resource sees a paused holder's
	// write; see Expect).
	FaultOutcomes map[Scenario]Status
	// Inapplicable names the scenarios that cannot be exercised on the backend, with
	// the reason (e.g. a store that keeps a silent holder's lock for hours grants no
	// second client within a scenario's bound). They are expected, and reported, not
	// applicable, with the reason as their evidence.
	Inapplicable map[Scenario]string
	// FaultTrials raises the number of trials of a scenario: for a Sometimes outcome,
	// enough that the violation is likely to show at least once. It never lowers it.
	FaultTrials map[Scenario]int

	// The coordination primitives beyond the mutex, each nil when the backend has none.
	Semaphore *Primitive // counting semaphores
	RWLock    *Primitive // read-write locks
	Election  *Primitive // leader election
	MultiKey  *Primitive // all-or-nothing locks on a set of keys
}

// DeletionSeen says how a holder learns that its lock was deleted behind its back.
type DeletionSeen string

const (
	// SeenByRefresh: nobody tells the holder; its next refresh (or release) finds the
	// lock gone, and the lease ends with dlock.CauseRefused.
	SeenByRefresh DeletionSeen = ""
	// SeenByWatch: the client watches its lock's record (a ZooKeeper node, an etcd
	// key): the lease ends at once, with dlock.CauseDeleted.
	SeenByWatch DeletionSeen = "watch"
	// SeenBySession: the lock is its session's (GET_LOCK): deleting it means ending
	// the session (killing the connection), and the lease ends with
	// dlock.CauseSession.
	SeenBySession DeletionSeen = "session"
)

// Primitive declares what one coordination primitive beyond the mutex guarantees on a
// backend. The suite checks the primitive's properties as it checks the mutex's:
// guarantees must hold, declared weaknesses must reproduce.
type Primitive struct {
	// Native: the store implements the primitive itself. False: dlock builds it from
	// the backend's mutexes (a generic recipe, with the limits its docs state).
	Native bool
	// Fencing: the primitive's leases carry tokens that increase per key.
	Fencing bool
	// FIFO: waiters are served in arrival order.
	FIFO bool
	// WriterPreference (read-write locks): a waiting exclusive acquirer keeps new
	// shared acquirers out, so that it gets in within a bound however many readers
	// come.
	WriterPreference bool
	// Weaknesses: the primitive's properties the backend is known not to guarantee.
	Weaknesses []Property
}

// Weak reports whether p is a declared weakness.
func (c Capabilities) Weak(p Property) bool { return slices.Contains(c.Weaknesses, p) }

// Expect returns what the declaration predicts for scenario s: NotApplicable if
// Inapplicable names it; FaultOutcomes[s] if set; otherwise Violated for HolderPause (no lease survives a pause of its holder
// without a fenced resource), NotApplicable for HolderPauseFenced and
// FailoverFencing without Fencing (a backend whose tokens are all 0 cannot fence:
// a fenced resource refuses token 0), and Held for everything else.
func (c Capabilities) Expect(s Scenario) Status {
	if _, ok := c.Inapplicable[s]; ok {
		return NotApplicable
	}
	if st, ok := c.FaultOutcomes[s]; ok {
		return st
	}
	switch s {
	case HolderPause:
		return Violated
	case HolderPauseFenced, FailoverFencing, FailoverFencedWrite:
		if !c.Fencing {
			return NotApplicable
		}
	}
	return Held
}

// Finding is one thing an inspection of a deployment's own configuration found
// (dlock.Inspect, `dlock check --doctor`): a setting, as the server reports it, and
// what it means for the locks under one fault scenario of the conformance report —
// or, for a setting that matters without any fault (eviction), one property.
type Finding struct {
	// Scenario is the fault under which Setting matters, in the report's words;
	// empty when Property names what is at risk instead.
	Scenario Scenario
	// Property is what Setting puts at risk without any fault; empty when Scenario is
	// set.
	Property Property
	// Exposed: this deployment is exposed — under Scenario (or at any time, for a
	// Property) its locks lose what Detail says. False: the setting protects the
	// locks, or the finding is for information.
	Exposed bool
	// Setting is what was read, in the server's terms, e.g. "appendonly=no".
	Setting string
	// Detail says in a sentence or two what the setting means for the locks.
	Detail string
}

// Topic is the report's name for what f is about: its Scenario, else its Property.
func (f Finding) Topic() string {
	if f.Scenario != "" {
		return string(f.Scenario)
	}
	return string(f.Property)
}
