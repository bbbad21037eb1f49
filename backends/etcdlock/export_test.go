package etcdlock

// HeldLocks and IdleLeaseBuckets show the sizes of a Locker's internal tables to the
// resource-bound tests.
func HeldLocks(l *Locker) int        { return l.d.heldCount() }
func IdleLeaseBuckets(l *Locker) int { return l.d.leases.idleBuckets() }
