package conformance

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// The fault campaign of the primitives: the mutex's scenarios (same harness
// interfaces, same expectations: a backend's primitive is expected to fare as its
// mutex does) run on a semaphore, on a read-write lock and on an election's
// candidates (election_faults.go), each a cell of the report
// (spec.SemaphoreScenarios, spec.RWLockScenarios, spec.ElectionScenarios).

func init() {
	primitiveFaultMakers = append(primitiveFaultMakers, semaphoreFaults, rwFaults, electionFaults)
}

func semaphoreFaults(f *faults) []run {
	if f.caps.Semaphore == nil {
		return nil
	}
	p := &subject{f: f, trialsOf: halfTrials(f), fam: semaphoreFamily, kind: "semaphore:1", bound: spec.SemaphoreBound, returns: spec.SemaphorePermitReturns,
		gaugeMax: semLimit, contend: func(t testing.TB, l dlock.Locker, k string, _, _ int) (handle, bool) {
			return semHandle(t, l, k, semLimit), false
		}}
	return p.runs(spec.SemaphoreScenarios)
}

func rwFaults(f *faults) []run {
	if f.caps.RWLock == nil {
		return nil
	}
	p := &subject{f: f, trialsOf: halfTrials(f), fam: rwFamily, kind: "exclusive", bound: spec.RWExclusion, returns: spec.RWLeaseReturns,
		contend: func(t testing.TB, l dlock.Locker, k string, c, r int) (handle, bool) {
			exclusive := (c+r)%3 == 0
			return rwHandle(t, l, k, exclusive), exclusive
		}}
	return p.runs(spec.RWLockScenarios)
}

// halfTrials gives a primitive's scenario half the trials of the mutex's in a
// quick run (rounded up: 2 of the default 3), to keep its time in bounds — the store
// under the fault is the same — and as many as the mutex's in a full campaign (20
// or more trials asked: every cell of the committed report has them), or more where
// the declaration asks.
func halfTrials(f *faults) func(spec.Scenario) int {
	return func(base spec.Scenario) int {
		n := defaultTrials()
		if n < fullCampaign {
			n = (n + 1) / 2
		}
		return max(n, f.caps.FaultTrials[base])
	}
}

// fullCampaign is the number of trials from which a run counts as the full campaign.
const fullCampaign = 20

// childAcquire takes what a holder child was asked to hold: the mutex (kind ""),
// one permit of a semaphore ("semaphore:<limit>"), a read-write lock's "shared"
// or "exclusive" lease, or leadership of the election named key ("election").
func childAcquire(ctx context.Context, l dlock.Locker, key, kind string, opts ...dlock.Option) (dlock.Lease, error) {
	switch {
	case kind == "":
		return l.Acquire(ctx, key, opts...)
	case strings.HasPrefix(kind, "semaphore:"):
		n, err := strconv.Atoi(strings.TrimPrefix(kind, "semaphore:"))
		if err != nil {
			return nil, fmt.Errorf("holder kind %q: %w", kind, err)
		}
		sem, err := dlock.NewSemaphore(l, key, n)
		if err != nil {
			return nil, err
		}
		return sem.Acquire(ctx, opts...)
	case kind == "election":
		e, err := dlock.NewElection(l, key)
		if err != nil {
			return nil, err
		}
		return e.Campaign(ctx, candidateValue, opts...)
	case kind == "shared" || kind == "exclusive":
		m, err := dlock.NewRWMutex(l, key)
		if err != nil {
			return nil, err
		}
		if kind == "shared" {
			return m.AcquireShared(ctx, opts...)
		}
		return m.Acquire(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown holder kind %q", kind)
}
