package etcdlock

// HeldLocks and IdleLeaseBuckets show the sizes of a Locker's internal tables to the
// resource-bound tests.
func HeldLocks(l *Locker) int        { return l.d.heldCount() }
func IdleLeaseBuckets(l *Locker) int { return l.d.leases.idleBuckets() }

// OwnClient makes Close close the client given to New too, as the URL opener's
// Lockers do. The conformance harness makes a client per Locker: clients left open
// until the test ended kept their connections, and a property's 20 trials (the full
// campaign's) on the 3-member cluster ran the test out of file descriptors.
func OwnClient() Option { return withOwnClient() }
