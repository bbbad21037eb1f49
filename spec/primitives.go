package spec

// The properties of the coordination primitives beyond the mutex that
// conformance.Run checks for a backend that declares them (Capabilities.Semaphore,
// Capabilities.RWLock), each a named subtest, in the order of SemaphoreProperties
// and RWLockProperties. Weaknesses of a primitive are declared in its Primitive.

// Counting semaphores: at most a limit of leases on one key at once.
const (
	SemaphoreBound         Property = "SemaphoreBound"         // never more than limit holders at once, and limit holders are reached
	SemaphorePermitReturns Property = "SemaphorePermitReturns" // a vanished holder's permit comes back after its TTL (or session), not before
	SemaphoreConflict      Property = "SemaphoreConflict"      // another limit, or a read-write lock on the key: ErrConflict, nothing granted
	SemaphoreFencing       Property = "SemaphoreFencing"       // tokens strictly increase from one grant to a later one (or are all 0 without fencing)
	SemaphoreCancellation  Property = "SemaphoreCancellation"  // ctx ends a wait for a permit promptly and leaves nothing behind
	SemaphoreClose         Property = "SemaphoreClose"         // Close ends the client's permits and frees them; ErrClosed afterwards
	SemaphoreDoneAndErr    Property = "SemaphoreDoneAndErr"    // a permit's Done closes on release, expiry and loss with the right Err
)

// SemaphoreProperties lists the semaphore properties in the order conformance.Run
// checks them.
var SemaphoreProperties = []Property{SemaphoreBound, SemaphorePermitReturns, SemaphoreConflict,
	SemaphoreFencing, SemaphoreCancellation, SemaphoreClose, SemaphoreDoneAndErr}

// Read-write locks: shared leases together, an exclusive lease alone.
const (
	RWExclusion    Property = "RWExclusion"    // an exclusive lease is alone; shared leases do overlap (observed)
	WriterProgress Property = "WriterProgress" // under a stream of shared acquirers, a waiting exclusive acquirer gets in within a bound
	RWLeaseReturns Property = "RWLeaseReturns" // a vanished holder's lease frees after its TTL (or session), not before
	RWConflict     Property = "RWConflict"     // a semaphore on the key: ErrConflict, nothing granted
	RWFencing      Property = "RWFencing"      // tokens strictly increase from one grant to a later one (or are all 0 without fencing)
	RWCancellation Property = "RWCancellation" // ctx ends a wait promptly and leaves nothing behind
	RWClose        Property = "RWClose"        // Close ends the client's leases and frees them; ErrClosed afterwards
	RWDoneAndErr   Property = "RWDoneAndErr"   // a lease's Done closes on release, expiry and loss with the right Err
)

// RWLockProperties lists the read-write lock properties in the order
// conformance.Run checks them.
var RWLockProperties = []Property{RWExclusion, WriterProgress, RWLeaseReturns, RWConflict,
	RWFencing, RWCancellation, RWClose, RWDoneAndErr}

// The fault scenarios of the primitives: the mutex's scenarios (same harness
// interfaces), run on a semaphore or on a read-write lock. A backend's primitive is
// expected to fare as its mutex does (Capabilities.Expect of the mutex's scenario).
const (
	SemaphoreHolderCrash   Scenario = "SemaphoreHolderCrash"   // [URLer] a permit holder gets SIGKILL: its permit returns
	SemaphoreHolderPause   Scenario = "SemaphoreHolderPause"   // [URLer] a permit holder is paused past its TTL, then writes
	SemaphoreServerRestart Scenario = "SemaphoreServerRestart" // [ServerRestarter] every server restarts while the permits are held
	SemaphoreFailover      Scenario = "SemaphoreFailover"      // [Failoverer] a lagging replica is promoted while the permits are held
	SemaphorePartition     Scenario = "SemaphorePartition"     // [Partitioner] a permit holder's link is blackholed
	SemaphoreQuorumLoss    Scenario = "SemaphoreQuorumLoss"    // [NodeStopper] a minority, then a majority of nodes stop
	SemaphoreLeaderKill    Scenario = "SemaphoreLeaderKill"    // [LeaderKiller] the leader dies under contention for permits
	SemaphoreClockJump     Scenario = "SemaphoreClockJump"     // [ClockJumper] the server's clock jumps forward

	RWHolderCrash   Scenario = "RWHolderCrash"   // [URLer] an exclusive holder gets SIGKILL: its lease frees
	RWHolderPause   Scenario = "RWHolderPause"   // [URLer] an exclusive holder is paused past its TTL, then writes
	RWServerRestart Scenario = "RWServerRestart" // [ServerRestarter] every server restarts while an exclusive lease is held
	RWFailover      Scenario = "RWFailover"      // [Failoverer] a lagging replica is promoted while an exclusive lease is held
	RWPartition     Scenario = "RWPartition"     // [Partitioner] an exclusive holder's link is blackholed
	RWQuorumLoss    Scenario = "RWQuorumLoss"    // [NodeStopper] a minority, then a majority of nodes stop
	RWLeaderKill    Scenario = "RWLeaderKill"    // [LeaderKiller] the leader dies under contention of readers and writers
	RWClockJump     Scenario = "RWClockJump"     // [ClockJumper] the server's clock jumps forward
)

// SemaphoreScenarios and RWLockScenarios list the primitives' fault scenarios in
// the order conformance.RunFaults runs them; MutexScenarioOf names the mutex
// scenario each one mirrors.
var (
	SemaphoreScenarios = []Scenario{SemaphoreHolderCrash, SemaphoreHolderPause, SemaphoreServerRestart, SemaphoreFailover,
		SemaphorePartition, SemaphoreQuorumLoss, SemaphoreLeaderKill, SemaphoreClockJump}
	RWLockScenarios = []Scenario{RWHolderCrash, RWHolderPause, RWServerRestart, RWFailover,
		RWPartition, RWQuorumLoss, RWLeaderKill, RWClockJump}
)

// MutexScenarioOf returns the mutex scenario a primitive's scenario mirrors (s
// itself for a mutex scenario).
func MutexScenarioOf(s Scenario) Scenario {
	if base, ok := mirrors[s]; ok {
		return base
	}
	return s
}

// mirrors maps each primitive's scenario to the mutex scenario it mirrors (each
// primitive's file adds its own in init, through mirror).
var mirrors = map[Scenario]Scenario{}

// mirror records that list[i] mirrors base[i].
func mirror(list, base []Scenario) {
	for i, s := range list {
		mirrors[s] = base[i]
	}
}

// Family is one primitive beyond the mutex as the report and the docs group it: its
// properties and its fault scenarios.
type Family struct {
	Name       string // "semaphore", "rwlock", "election", "multikey"
	Properties []Property
	Scenarios  []Scenario
}

// Families lists the primitives beyond the mutex, in the order of
// PrimitiveProperties.
var Families = []Family{
	{"semaphore", SemaphoreProperties, SemaphoreScenarios},
	{"rwlock", RWLockProperties, RWLockScenarios},
	{"election", ElectionProperties, ElectionScenarios},
	{"multikey", MultiKeyProperties, nil},
}

// Weak reports whether p is a declared weakness of the primitive.
func (p *Primitive) Weak(prop Property) bool {
	if p == nil {
		return false
	}
	for _, w := range p.Weaknesses {
		if w == prop {
			return true
		}
	}
	return false
}

// init lists the primitives' properties and scenarios (semaphores, read-write locks,
// elections, sets of keys, in that order) and what each scenario mirrors.
func init() {
	for _, f := range Families {
		PrimitiveProperties = append(PrimitiveProperties, f.Properties...)
		PrimitiveScenarios = append(PrimitiveScenarios, f.Scenarios...)
	}
	primitiveBase := []Scenario{HolderCrash, HolderPause, ServerRestart, Failover, Partition, QuorumLoss, LeaderKill, ClockJump}
	mirror(SemaphoreScenarios, primitiveBase)
	mirror(RWLockScenarios, primitiveBase)
	mirror(ElectionScenarios, []Scenario{HolderCrash, Partition, ServerRestart, Failover, LeaderKill, ClockJump})
}
