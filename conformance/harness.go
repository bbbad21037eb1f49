package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/spec"
)

// Vanisher is implemented by a harness that can make a client disappear the way a
// crashed process does: without releasing anything and without closing its session
// politely (e.g. by cutting its connections). Without it, the suite simulates a
// vanished holder of a per-lease-TTL backend by abandoning its lease.
type Vanisher interface {
	Vanish(t testing.TB, l dlock.Locker)
}

// KeyDeleter is implemented by a harness that can delete a lock behind its holder's
// back, as an operator (or a failover) would. It unlocks the checks that a refresh or
// release of a lock that is no longer ours is refused, and that auto-renewal reports
// the loss.
type KeyDeleter interface {
	DeleteKey(t testing.TB, key string)
}

// QueueInspector is implemented by the harness of a backend that declares FIFO: it
// lets the suite see the store's queue, so that it can line waiters up in a known
// order.
type QueueInspector interface {
	// Waiting reports how many Acquires wait in the store's queue for key (the
	// holder not counted).
	Waiting(t testing.TB, key string) int
}

// WeaknessReproducer is implemented by a harness whose declared weakness needs a
// backend-specific fault to show (a crash between two commands, a client with a
// skewed clock). For such a property the generic check must still hold, and the
// harness's scenario must show the violation.
type WeaknessReproducer interface {
	// ReproduceWeakness runs a scenario meant to violate p and returns what it saw
	// (each string one violation, with evidence). ok is false when the harness has no
	// scenario for p; the generic check then must show the violation itself.
	ReproduceWeakness(t *testing.T, p spec.Property) (violations []string, ok bool)
}

// trialRecorders maps the *testing.T of a property whose WeaknessReproducer runs to
// the recorder of its trial (see Recorded).
var trialRecorders sync.Map

// Recorded returns l wrapped so that its calls — acquisitions with their tokens,
// releases, the leases' ends — go into the recorded history of the trial that t
// runs, under the client name name, and are judged by the suite's checker with the
// trial's claims (a MutualExclusion trial: no two holds of a key overlap). A
// WeaknessReproducer wraps the clients of its scenario with it, so that the
// violation it reproduces is seen in the history, not only in its own words. Outside
// such a trial (any other t) it returns l unchanged. Closing the wrapper closes l.
func Recorded(t testing.TB, l dlock.Locker, name string) dlock.Locker {
	if rec, ok := trialRecorders.Load(t); ok {
		return rec.(*recorder).locker(l, name)
	}
	return l
}

// URLer is implemented by a harness whose backend can be opened by URL from another
// process: holders then run in child processes that the suite kills or pauses. The
// test binary must call ChildMain first thing in TestMain.
type URLer interface {
	URL(t testing.TB) string
}

// ServerRestarter restarts every server of the backend (with whatever persistence
// the harness configured) and returns once they answer again.
type ServerRestarter interface {
	RestartServers(t testing.TB)
}

// Failoverer drives an asynchronous-replication failover: PauseReplication makes the
// replica stop receiving writes; Failover promotes it and points every client of the
// harness at it.
type Failoverer interface {
	PauseReplication(t testing.TB)
	Failover(t testing.TB)
}

// Link is one client's network path to the backend.
type Link interface {
	Blackhole() // keep connections open but drop every byte both ways
	Restore()
}

// Partitioner gives a client whose link to the backend can be cut.
type Partitioner interface {
	NewPartitionedLocker(t testing.TB) (dlock.Locker, Link)
}

// NodeStopper stops and restarts the independent nodes of a multi-node backend.
type NodeStopper interface {
	Nodes() int
	StopNodes(t testing.TB, n int) // stop n nodes (n counts all stopped so far)
	RestartNodes(t testing.TB)     // bring every stopped node back
}

// LeaderKiller kills the current leader of the backend's cluster; the cluster is
// expected to elect another.
type LeaderKiller interface {
	KillLeader(t testing.TB)
}

// NodeFaulter faults chosen nodes of a multi-node backend whose nodes are
// independent (Redlock's masters): the contested cases of the Redlock debate depend
// on which nodes fail. Nodes are numbered from 0.
type NodeFaulter interface {
	Nodes() int
	StopNode(t testing.TB, i int)                       // the node stops answering (killed)
	StartNode(t testing.TB, i int)                      // it comes back (as a restart leaves it)
	JumpNodeClock(t testing.TB, i int, d time.Duration) // its clock jumps forward by d
}

// ClockJumper moves the server's clock (one server's, for multi-node backends)
// forward by d.
type ClockJumper interface {
	JumpClock(t testing.TB, d time.Duration)
}

// Diagnoser is implemented by a harness that can describe the store's state of a
// key (its queue, who owns what) for the evidence of a scenario that went wrong,
// e.g. a lock service that did not resume after a leader kill.
type Diagnoser interface {
	Diagnose(t testing.TB, key string) string
}

// FaultLimiter is implemented by a harness that cannot inject some of the faults its
// interfaces offer where it runs now (e.g. a server's clock, when the servers run in
// containers on a kernel other than this machine's). RunFaults does not run the
// scenarios named in the map: each is skipped and reported not applicable, its
// reason in the skip message and in the cell's evidence.
type FaultLimiter interface {
	UnavailableFaults() map[spec.Scenario]string
}

// FenceGuarder is implemented by a harness that offers fencing guards (package
// fence) to stand in front of the protected resource. In the scenarios where a
// fenced resource decides — HolderPauseFenced, and FailoverFencing's
// FailoverFencedWrite (the token handed out twice) — every write the holders make
// goes to each guard too, as a Check of the trial's key with the holder's token and
// name (its writer), and each guard's decisions, recorded in the trial's history
// (Event.Resource), make a cell of their own: the backend's name with the guard's
// ("redis (guard redisfence)"), checked against docs/fencing.md's rule like the
// suite's resource, and expected to hold where the scenario is. The guards see
// the same trials as the suite's resource: they cost no trial of their own.
type FenceGuarder interface {
	// FenceGuards returns the guards for the scenario running in t (their stores
	// ready; cleanups on t). A guard that cannot decide (its store fails) leaves
	// its cell not exercised, which fails the test.
	FenceGuards(t testing.TB) []FenceGuard
}

// FenceGuard is one guard a FenceGuarder offers.
type FenceGuard struct {
	// Name names the guard (and its store) in the cell: "sqlfence on MariaDB".
	Name  string
	Guard fence.Guard
}
