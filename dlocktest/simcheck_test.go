package dlocktest

import (
	"errors"
	"time"

	"github.com/dlock-go/dlock"
)

// The simulation's checks. As the schedule goes (simulate_test.go):
//
//   - exclusion from the clients' own view of validity: when a holder acts on
//     what its lease protects, no other lease the workload counts on conflicts
//     with it while valid in its own client's view (Done open: a look at Done
//     ends a lease past its deadline) — two mutexes or sets sharing a key, a
//     writer and a reader, more permits than the limit, two leaders;
//   - Done and Err agree; Release that returned nil leaves Err ErrReleased, a
//     Refresh or Release that returned ErrNotHeld a closed Done;
//   - every call returns within its context's bound (an acquisition within a
//     second more: the give-back of a grant that lands as it ends); a Close within
//     closeBound, with every lease of its client ended.
//
// At the end (final), after the Store's Close:
//
//   - every lease granted has ended, for the right cause: ErrReleased if a
//     Release returned nil; the cause of a Lose that returned nil, unless the
//     lease had ended before; never CauseExpired for an auto-renewed lease, nor
//     CauseUnreachable for one that was not, unless a Lose said so; CauseRefused
//     only when the store had indeed dropped the lock (a Release tried again after
//     its reply was lost is not a loss);
//   - dlock.New kept its promises to the driver: no call reached it after its
//     Close, and it was not closed with calls in flight before the drain bound
//     (Store.breaches);
//   - no goroutine of the schedule is left.
func (sim *simulation) final() {
	sim.mu.Lock()
	leases := append([]*held(nil), sim.leases...)
	breaches := append([]string(nil), sim.s.breaches...)
	sim.mu.Unlock()
	for _, b := range breaches {
		sim.violate("the lease core broke its promise to the driver: %s", b)
	}
	for _, h := range leases {
		sim.ended(h)
	}
	if n, dump := bubbleGoroutines(); n > 0 {
		sim.violate("%d goroutines left after every client's Close:\n%s", n, dump)
	}
}

// ended checks how h's lease ended.
func (sim *simulation) ended(h *held) {
	if sim.open(h) {
		sim.violate("%v is valid after the store's Close", h)
		return
	}
	err := h.ls.Err()
	var endedAt time.Time
	if e, ok := h.ls.(interface{ EndedAt() time.Time }); ok {
		endedAt = e.EndedAt()
	}
	if sl, ok := h.ls.(*dlock.SetLease); ok {
		if e, ok := sl.Lease.(interface{ EndedAt() time.Time }); ok {
			endedAt = e.EndedAt()
		}
	}
	var le *dlock.LossError
	isLoss := errors.As(err, &le)
	switch {
	case h.released:
		if !errors.Is(err, dlock.ErrReleased) {
			sim.violate("%v: Release returned nil, its Err is %v", h, err)
		}
		return
	case errors.Is(err, dlock.ErrReleased), errors.Is(err, dlock.ErrClosed):
		return
	case !isLoss:
		sim.violate("%v ended with %v: neither ErrReleased, ErrClosed nor a *LossError", h, err)
		return
	}
	if h.lose != 0 && (endedAt.IsZero() || !endedAt.Before(h.loseAt)) {
		want := h.lose
		if want == dlock.CauseExpired && h.auto {
			want = dlock.CauseUnreachable
		}
		if le.Cause != want {
			sim.violate("%v: the store lost it (%v) at %v; its Err is %v, want cause %v", h, h.lose, h.loseAt.Sub(sim.start), err, want)
		}
		return
	}
	switch le.Cause {
	case dlock.CauseExpired:
		if h.auto {
			sim.violate("%v is auto-renewed and ended with %v (CauseExpired: want CauseUnreachable)", h, err)
		}
	case dlock.CauseUnreachable:
		if !h.auto {
			sim.violate("%v is not auto-renewed and ended with %v (want CauseExpired at its deadline)", h, err)
		}
	case dlock.CauseRefused:
		lk := sim.s.lockOf(h.ls)
		if lk == nil {
			return
		}
		lk.mu.Lock()
		freed, expires := lk.freed, lk.expires
		lk.mu.Unlock()
		if freed == releasedByOwner || (freed == "" && endedAt.Before(expires)) {
			sim.violate("%v ended with %v at %v, but the store had not dropped it (%s)", h, err, endedAt.Sub(sim.start), orHeld(freed))
		}
	default:
		sim.violate("%v ended with %v: the store reported no loss", h, err)
	}
}

func orHeld(freed string) string {
	if freed == "" {
		return "held until its TTL"
	}
	return freed
}
