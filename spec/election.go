package spec

// The properties of leader election (Capabilities.Election), checked by
// conformance.Run for a backend that declares the primitive, in this order.
const (
	// ElectionSingleLeader: never two leaders of one election at once (the protected
	// resource sees no overlap) and, with Primitive.Fencing, each term's token is
	// larger than the term's before it; Leader reports the leader that holds the term.
	ElectionSingleLeader Property = "ElectionSingleLeader"
	// ElectionObserve: every observer sees every change of leader, in order, with
	// increasing terms, and nothing else (no leader that was not, no term twice).
	ElectionObserve Property = "ElectionObserve"
	// ElectionFailover: a leader that vanished (crashed, cut off) is replaced within
	// its TTL or session timeout, and not before its own lease has ended (Done).
	ElectionFailover Property = "ElectionFailover"
	// ElectionResign: a leader that resigns (Release) is replaced promptly by a
	// waiting candidate, and Leader stops reporting it.
	ElectionResign Property = "ElectionResign"
)

// ElectionProperties lists the election properties in the order conformance.Run
// checks them.
var ElectionProperties = []Property{ElectionSingleLeader, ElectionObserve, ElectionFailover, ElectionResign}

// The fault scenarios of leader election: the mutex's scenarios (same harness
// interfaces, in brackets), run on candidates instead of lock holders. Each
// threatens ElectionSingleLeader (ElectionLeaderCrash: ElectionFailover): a second
// leader elected while the first one's lease is live is a violation. A backend's
// election is expected to fare as its mutex does (Capabilities.Expect of the
// scenario MutexScenarioOf names).
const (
	ElectionLeaderCrash   Scenario = "ElectionLeaderCrash"   // [URLer] the leader's process gets SIGKILL: replaced within its TTL or session, not before
	ElectionPartition     Scenario = "ElectionPartition"     // [Partitioner] the leader's link is blackholed: it steps down before another is elected
	ElectionServerRestart Scenario = "ElectionServerRestart" // [ServerRestarter] every server restarts while a leader leads
	ElectionReplicaLoss   Scenario = "ElectionReplicaLoss"   // [Failoverer] a lagging replica is promoted while a leader leads
	ElectionLeaderKill    Scenario = "ElectionLeaderKill"    // [LeaderKiller] the store's cluster leader dies while candidates take turns
	ElectionClockJump     Scenario = "ElectionClockJump"     // [ClockJumper] the server's clock jumps forward while a leader leads
)

// ElectionScenarios lists the election fault scenarios in the order
// conformance.RunFaults runs them.
var ElectionScenarios = []Scenario{ElectionLeaderCrash, ElectionPartition, ElectionServerRestart, ElectionReplicaLoss, ElectionLeaderKill, ElectionClockJump}
