package conformance

import (
	"context"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// The fault scenarios of leader election (spec.ElectionScenarios): the mutex's,
// run by the scenarios engine (scenarios.go) on candidates instead of lock holders —
// a holder child campaigns (childAcquire's "election" kind), a contender campaigns
// in the election the key names — so a crashed, cut-off or faulted leader is judged
// exactly as a lock holder is, against what its mutex counterpart expects.

// candidateValue is the value the suite's candidates campaign with.
const candidateValue = "candidate"

// candidate is a handle that campaigns in an election.
type candidate struct{ e *recElection }

func (c candidate) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return c.e.Campaign(ctx, candidateValue, opts...)
}

func (c candidate) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return c.e.TryCampaign(ctx, candidateValue, opts...)
}

// newCandidate returns a (recorded) candidate of the election name on l.
func newCandidate(t testing.TB, l dlock.Locker, name string) handle {
	return candidate{election(t, l, name)}
}

// electionFamily: a contender campaigns; one leader fills the election.
var electionFamily = family{
	name:      "election",
	contender: newCandidate,
	fill: func(t testing.TB, l dlock.Locker, k string, opts ...dlock.Option) ([]dlock.Lease, error) {
		return tryAll(t, []handle{newCandidate(t, l, k)}, opts...)
	},
}

// electionFaults returns the election scenarios, for a backend that declares
// elections. Grants of one election follow one another: with fencing, LeaderKill
// checks that the terms' tokens increase across the leader's death.
func electionFaults(f *faults) []run {
	if f.caps.Election == nil {
		return nil
	}
	p := &subject{f: f, trialsOf: halfTrials(f), fam: electionFamily, kind: "election",
		bound: spec.ElectionSingleLeader, returns: spec.ElectionFailover, gaugeMax: 1, tokens: f.caps.Election.Fencing,
		contend: func(t testing.TB, l dlock.Locker, k string, _, _ int) (handle, bool) {
			return newCandidate(t, l, k), true
		}}
	return p.runs(spec.ElectionScenarios)
}
