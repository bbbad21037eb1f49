package conformance

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// The mutex's scenarios that have no primitive version: a crashed waiter, a hung
// store, fencing across a failover, Kleppmann's counterexample, and the second fact
// of a leader kill.

// Bounds of StoreHang: the context Release is given, and the slack every bound gets
// for scheduling on a loaded machine.
const (
	hangReleaseCtx = 200 * time.Millisecond
	hangSlack      = 300 * time.Millisecond
	closeBound     = 2 * time.Second // the Locker's documented bound for releasing its leases
)

// storeHang cuts every link of two clients that hold renewed leases (the store stops
// answering them, as a SIGSTOPped server would), after a renewal is on its way. It
// checks that the clients stay in control: Release with a short context returns
// within it; Close returns within its bound; Done closes by the validity deadline
// (by the session timeout for a session store), lost as unreachable; and once the store answers again,
// both locks are free within their TTL (session timeout), plus the store's own
// expiry granularity.
func (f *faults) storeHang(t *testing.T, r *cellRun) {
	r.c.Property = "BoundedOperations"
	p := f.h.(Partitioner)
	b := f.client(t)
	ttl := f.leaseTTL()
	doneBound := ttl
	if !f.caps.PerLeaseTTL && f.caps.SessionTimeout > 0 {
		doneBound = f.caps.SessionTimeout
	}
	for i := range r.trials() {
		k1, k2 := key(t, fmt.Sprintf("hang%d-release", i)), key(t, fmt.Sprintf("hang%d-close", i))
		var back int64
		func() {
			a1, link1 := p.NewPartitionedLocker(t)
			a2, link2 := p.NewPartitionedLocker(t)
			a1, a2 = r.rec.locker(a1, "hung-release"), r.rec.locker(a2, "hung-close")
			defer a1.Close()
			defer a2.Close()
			defer link1.Restore()
			defer link2.Restore()
			granted := time.Now()
			l1, err := a1.Acquire(ctxFor(t, 30*time.Second), k1, dlock.WithTTL(ttl), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire before the hang: %v", i, err)
			}
			// The history dates the grant when Acquire returned; the store answers
			// again only once the bound, counted from then, has passed. So a
			// holder that learns of its loss only when the store answers again
			// ends past the bound however fast it reconnects, and one that ends
			// by itself in time ends before the store answers: the verdict does
			// not hang on how long the reconnection takes.
			grantedAt := time.Now()
			if _, err := a2.Acquire(ctxFor(t, 30*time.Second), k2, dlock.WithTTL(ttl), dlock.WithAutoRenew()); err != nil {
				t.Fatalf("trial %d: acquire before the hang: %v", i, err)
			}
			hang := r.rec.hist().call("", OpFault, Event{Note: "store hang (both links blackholed)"})
			link1.Blackhole()
			link2.Blackhole()
			sleepUntil(granted.Add(ttl/3 + ttl/10)) // a renewal (at TTL/3) is on its way and hangs

			ctx, cancel := context.WithTimeout(context.Background(), hangReleaseCtx)
			err = l1.Release(ctx)
			cancel()
			r.rec.expect(err != nil, "Release returned nil while the store did not answer")
			_ = a2.Close()
			select { // Done by its bound: the checker reads when from the history
			case <-l1.Done():
			case <-time.After(time.Until(grantedAt.Add(doneBound + hangSlack))):
			}
			link1.Restore()
			link2.Restore()
			back = hang(nil, Event{}).T
			for _, k := range []string{k1, k2} {
				if ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k); err == nil {
					_ = ls.Release(ctxFor(t, 10*time.Second))
				}
			}
		}()
		free := func(k string) liveness {
			return liveness{key: k, after: back, within: f.freeBound(ttl), what: "not free once the store answered again"}
		}
		r.judge(claims{exclusion: true,
			bounds: []bound{
				{client: "hung-release", op: OpRelease, within: hangReleaseCtx + hangSlack, what: fmt.Sprintf("Release with a %v context while the store did not answer", hangReleaseCtx)},
				{client: "hung-close", op: OpClose, within: closeBound + hangSlack, what: "Close while the store did not answer"},
			},
			lasts:     []lasts{{key: k1, within: doneBound + hangSlack, what: "Done while the store did not answer"}},
			causes:    []causes{f.cutOff("hung-release", "a lease whose store stopped answering")},
			liveness:  []liveness{free(k1), free(k2)},
			exercised: heldAtFault(k1, "store hang")})
	}
}

// failoverFencing: a holder is granted a token on the master while its replica
// lags, and writes it to a fenced resource; the replica is promoted; the next grant
// must get a larger token, and writes too. A store whose counter lost the increment
// hands the same token out again (FencingMonotonic violated) — and the fenced
// resource must then refuse the second write: that fact is the cell of
// FailoverFencedWrite, decided from the same trials — and so are the cells of the
// harness's fencing guards (FenceGuarder), to which both holders write too.
func (f *faults) failoverFencing(t *testing.T, r *cellRun) {
	r.c.Property = string(spec.FencingMonotonic)
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	wc := results.Cell{Backend: r.c.Backend, Scenario: string(spec.FailoverFencedWrite), Property: "ResourceSafety",
		Expected: f.caps.Expect(spec.FailoverFencedWrite)}
	write := newCellRun(t, &wc, r.want)
	write.rec = r.rec
	f.writeFact = write
	guards := f.guardRuns(t, r, spec.FailoverFencedWrite, wc.Property)
	defer f.addGuardCells(t, guards)
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("failover-fence%d", i))
		res := newGuardedResource(r.rec, k, guards)
		r.rec.fault("replication paused", func() { fo.PauseReplication(t) })
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		if err == nil {
			if res.Enter("before-failover", la.Token()) {
				res.Leave("before-failover")
			}
			_ = la.Release(ctxFor(t, 10*time.Second)) // consecutive grants: no overlap here
		} else {
			r.c.Note("trial %d: no grant while the replica lagged: %v", i, err)
		}
		r.rec.fault("failover", func() { fo.Failover(t) })
		if err == nil {
			if lb, err := b.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second)); err == nil {
				if res.Enter("after-failover", lb.Token()) {
					res.Leave("after-failover")
				}
				_ = lb.Release(ctxFor(t, 10*time.Second))
			} else {
				r.c.Note("trial %d: no grant after the failover: %v", i, err)
			}
		}
		both := func(v *view) (bool, string) {
			fo, _ := v.faultNamed("failover")
			var before, after bool
			for _, h := range v.grants(k) {
				before = before || h.start < fo.start
				after = after || h.start > fo.end
			}
			switch {
			case !before:
				return false, "no grant before the failover (while the replica lagged)"
			case !after:
				return false, "no grant after the failover"
			}
			return true, ""
		}
		r.judge(claims{fencing: true, exercised: both})
		write.i, write.cur = i, r.cur
		write.judge(claims{resource: true, recipe: true, exercised: both})
		judgeGuards(r, guards, func(g string) claims {
			return claims{resource: true, recipe: true, guard: g, exercised: guardDecided(g, both)}
		})
	}
}

// clockJumpBareMajority is Kleppmann's counterexample to Redlock: two of five nodes
// are down while a client is granted the lock (so it stands on a bare majority of
// three), they come back, then one of the three jumps its clock past the TTL; a
// second client asks. The store's own clocks decide, so the second client finds a
// majority free while the first lease is live.
func (f *faults) clockJumpBareMajority(t *testing.T, r *cellRun) {
	nf := f.h.(NodeFaulter)
	n := nf.Nodes()
	quorum := n/2 + 1
	a, b := f.client(t), f.client(t)
	const ttl = 30 * time.Second
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("kleppmann%d", i))
		down := r.rec.hist().call("", OpFault, Event{Note: fmt.Sprintf("nodes %d-%d stopped", quorum, n-1)})
		for j := quorum; j < n; j++ {
			nf.StopNode(t, j)
		}
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(ttl))
		// The grant was decided by a majority; the requests still on their way to the
		// down nodes (a client may retry them) must give up before those come back, or
		// they land there and the lease no longer stands on a bare majority.
		time.Sleep(time.Second)
		for j := quorum; j < n; j++ {
			nf.StartNode(t, j)
		}
		down(nil, Event{})
		if err != nil {
			t.Fatalf("trial %d: grant on a bare majority of %d of %d nodes: %v", i, quorum, n, err)
		}
		r.rec.fault(fmt.Sprintf("node %d's clock jumped %v", quorum-1, 2*ttl), func() { nf.JumpNodeClock(t, quorum-1, 2*ttl) })
		lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
		if err != nil && !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("trial %d: %v", i, err)
		}
		if lb != nil {
			_ = lb.Release(ctxFor(t, 10*time.Second))
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
		r.judge(claims{exclusion: true, exercised: func(v *view) (bool, string) {
			d, _ := v.faultNamed("nodes")
			if !v.heldAt(k, "", d.end) {
				return false, "the lease granted on the bare majority was not held when the nodes came back"
			}
			return heldAtFault(k, "node")(v)
		}})
	}
}

// leaderKillLease reports the second fact of the leader kill's trials (leaderKill
// measures both): whether a lease held across the kill was kept.
func (f *faults) leaderKillLease(t *testing.T, r *cellRun) {
	if f.leaseFact == nil {
		t.Skipf("%s is measured by the %s trials: run them too", spec.LeaderKillLease, spec.LeaderKill)
	}
	f.leaseFact.copyInto(r.c)
}

// failoverFencedWrite reports the second fact of FailoverFencing's trials: whether
// the fenced resource refused what it must.
func (f *faults) failoverFencedWrite(t *testing.T, r *cellRun) {
	if f.writeFact == nil {
		t.Skipf("%s is measured by the %s trials: run them too", spec.FailoverFencedWrite, spec.FailoverFencing)
	}
	f.writeFact.copyInto(r.c)
}

// waiterCrash: while a lock is held, a waiter in a child process queues for it, a
// second waiter queues behind it, the first waiter's process gets SIGKILL, and the
// holder releases. The second waiter must be granted within the bound a dead holder's
// lock gets (freeBound: the TTL, or the session timeout, plus slack): a dead waiter
// must not block the queue for longer than its own TTL. Where the harness can see the
// store's queue (a FIFO backend's QueueInspector) the two are seen queued in that
// order; elsewhere each is given a moment to start waiting.
func (f *faults) waiterCrash(t *testing.T, r *cellRun) {
	r.c.Property = string(spec.DeadlockFreedom)
	url := f.h.(URLer).URL(t)
	qi, canSee := f.h.(QueueInspector)
	canSee = canSee && f.caps.FIFO
	a, b := f.client(t), f.client(t)
	ttl := f.leaseTTL()
	queued := func(k string, n int) {
		t.Helper()
		if !canSee {
			time.Sleep(300 * time.Millisecond) // no view of the queue: let the waiter reach the store
			return
		}
		for end := time.Now().Add(30 * time.Second); qi.Waiting(t, k) < n; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%d waiters in the store's queue after 30s, want %d", qi.Waiting(t, k), n)
			}
		}
	}
	var served []time.Duration
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("waiter-crash%d", i))
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("trial %d: the holder: %v", i, err)
		}
		ch := startWaiter(t, r.rec, url, k, ttl, "crashing-waiter")
		queued(k, 1)
		got := make(chan error, 1)
		go func() {
			ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k, dlock.WithTTL(ttl))
			if err == nil {
				err = ls.Release(ctxFor(t, 10*time.Second))
			}
			got <- err
		}()
		queued(k, 2)
		ch.signal(syscall.SIGKILL)
		killed := mono()
		if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("trial %d: the holder's Release: %v", i, err)
		}
		if err := <-got; err == nil {
			served = append(served, time.Duration(mono()-killed))
		}
		r.judge(claims{exclusion: true,
			liveness: []liveness{{key: k, not: "crashing-waiter", after: killed, within: f.freeBound(ttl),
				what: fmt.Sprintf("the waiter behind a crashed waiter was not served (waiter TTL %v, session timeout %v)", ttl, f.caps.SessionTimeout)}},
			exercised: func(v *view) (bool, string) {
				if len(v.grants(k)) > 0 && v.grants(k)[0].client == "crashing-waiter" {
					return false, "the crashing waiter was granted before it was killed"
				}
				return true, ""
			}})
	}
	if len(served) > 0 {
		r.c.Note("the waiter behind the crashed one was served %v after the SIGKILL (waiter TTL %v, session timeout %v)", roundAll(served), ttl, f.caps.SessionTimeout)
	}
}
