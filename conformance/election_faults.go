package conformance

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// The fault scenarios of leader election (spec.ElectionScenarios) are the mutex's,
// run on candidates instead of lock holders: an electionHarness hands the mutex
// scenarios Lockers whose Acquire campaigns in the election named by the key (and
// holder child processes campaign too), so a crashed, cut-off or faulted leader is
// judged exactly as a lock holder is.

func init() {
	primitiveFaultMakers = append(primitiveFaultMakers, (*faults).electionFaults)
}

// envCandidate makes a holder child campaign in an election instead of taking a lock.
const envCandidate = "DLOCK_CHILD_KIND"

// holderTakes is what a holder child does: Acquire the key, or campaign in the
// election of that name.
func holderTakes(ctx context.Context, l dlock.Locker, key string, ttl time.Duration) (dlock.Lease, error) {
	if os.Getenv(envCandidate) == "election" {
		l = candidate{l}
	}
	return l.Acquire(ctx, key, dlock.WithTTL(ttl))
}

// candidate is a Locker whose Acquire campaigns in the election named key (with
// the value "candidate"), and TryAcquire makes one campaign attempt.
type candidate struct{ dlock.Locker }

func (c candidate) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	e, err := dlock.NewElection(c.Locker, key)
	if err != nil {
		return nil, err
	}
	return e.Campaign(ctx, "candidate", opts...)
}

func (c candidate) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	e, err := dlock.NewElection(c.Locker, key)
	if err != nil {
		return nil, err
	}
	return e.TryCampaign(ctx, "candidate", opts...)
}

// electionHarness gives the fault scenarios candidates instead of lock clients;
// everything else is the harness's own. RunFaults calls a scenario's method only
// when the harness underneath has it.
type electionHarness struct{ Harness }

func (h electionHarness) NewLocker(t testing.TB) dlock.Locker {
	return candidate{h.Harness.NewLocker(t)}
}
func (h electionHarness) URL(t testing.TB) string       { return h.Harness.(URLer).URL(t) }
func (h electionHarness) RestartServers(t testing.TB)   { h.Harness.(ServerRestarter).RestartServers(t) }
func (h electionHarness) PauseReplication(t testing.TB) { h.Harness.(Failoverer).PauseReplication(t) }
func (h electionHarness) Failover(t testing.TB)         { h.Harness.(Failoverer).Failover(t) }
func (h electionHarness) KillLeader(t testing.TB)       { h.Harness.(LeaderKiller).KillLeader(t) }
func (h electionHarness) JumpClock(t testing.TB, d time.Duration) {
	h.Harness.(ClockJumper).JumpClock(t, d)
}

func (h electionHarness) NewPartitionedLocker(t testing.TB) (dlock.Locker, Link) {
	l, link := h.Harness.(Partitioner).NewPartitionedLocker(t)
	return candidate{l}, link
}

func (h electionHarness) Diagnose(t testing.TB, key string) string {
	if d, ok := h.Harness.(Diagnoser); ok {
		return d.Diagnose(t, key)
	}
	return ""
}

// electionFaults returns the election scenarios, for a backend that declares
// elections: each runs its mutex counterpart on candidates and, unless the
// declaration names the election scenario itself, expects what the counterpart
// expects.
func (f *faults) electionFaults() []run {
	if f.caps.Election == nil {
		return nil
	}
	_, url := f.h.(URLer)
	_, restart := f.h.(ServerRestarter)
	_, fo := f.h.(Failoverer)
	_, part := f.h.(Partitioner)
	_, leader := f.h.(LeaderKiller)
	_, clock := f.h.(ClockJumper)
	on := func(s spec.Scenario, p spec.Property, scenario func(*faults, *testing.T, *results.Cell)) func(*testing.T, *results.Cell) {
		return func(t *testing.T, c *results.Cell) {
			if _, own := f.caps.FaultOutcomes[s]; !own {
				c.Expected = f.caps.Expect(spec.ElectionCounterpart(s))
			}
			g := *f
			g.h = electionHarness{f.h}
			g.childEnv = append(g.childEnv, envCandidate+"=election")
			scenario(&g, t, c)
			c.Property = string(p)
		}
	}
	return []run{
		{spec.ElectionLeaderCrash, url, on(spec.ElectionLeaderCrash, spec.ElectionFailover, (*faults).holderCrash)},
		{spec.ElectionPartition, part, on(spec.ElectionPartition, spec.ElectionSingleLeader, (*faults).partition)},
		{spec.ElectionServerRestart, restart, on(spec.ElectionServerRestart, spec.ElectionSingleLeader, (*faults).serverRestart)},
		{spec.ElectionReplicaLoss, fo, on(spec.ElectionReplicaLoss, spec.ElectionSingleLeader, (*faults).failover)},
		{spec.ElectionLeaderKill, leader, on(spec.ElectionLeaderKill, spec.ElectionSingleLeader, (*faults).leaderKill)},
		{spec.ElectionClockJump, clock, on(spec.ElectionClockJump, spec.ElectionSingleLeader, (*faults).clockJump)},
	}
}
