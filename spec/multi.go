package spec

// The properties of all-or-nothing locks on a set of keys (Capabilities.MultiKey),
// checked by conformance.Run for a backend that declares the primitive, in this
// order.
const (
	// MultiKeyExclusion: mutual exclusion holds per key between set leases and plain
	// mutexes on overlapping keys (the lock on a key is one lock, however it was
	// taken) and, with Primitive.Fencing, each key's tokens increase across both kinds
	// of grant.
	MultiKeyExclusion Property = "MultiKeyExclusion"
	// MultiKeyAllOrNothing: an attempt that fails leaves none of its keys held;
	// Release frees every key; the lease ends (Done) when one of its keys is lost.
	MultiKeyAllOrNothing Property = "MultiKeyAllOrNothing"
	// MultiKeyDeadlockFreedom: clients taking random overlapping sets all make
	// progress (no deadlock), and none sees a set half held by another.
	MultiKeyDeadlockFreedom Property = "MultiKeyDeadlockFreedom"
)

// MultiKeyProperties lists the multi-key properties in the order conformance.Run
// checks them.
var MultiKeyProperties = []Property{MultiKeyExclusion, MultiKeyAllOrNothing, MultiKeyDeadlockFreedom}
