package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// (by the session timeout for a session store); and once the store answers again,
// both locks are free within their TTL (session timeout), plus the store's own
// expiry granularity.
func (f *faults) storeHang(t *testing.T, c *results.Cell) {
	c.Property = "BoundedOperations"
	p := f.h.(Partitioner)
	b := f.client(t)
	ttl := f.leaseTTL()
	doneBound := ttl
	if !f.caps.PerLeaseTTL && f.caps.SessionTimeout > 0 {
		doneBound = f.caps.SessionTimeout
	}
	var releases, closes, dones, frees, backs []time.Duration
	for i := range f.trials {
		c.Trials++
		var bad []string // this trial's violations: the trial counts once
		violation := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
		func() {
			a1, link1 := p.NewPartitionedLocker(t)
			a2, link2 := p.NewPartitionedLocker(t)
			defer a1.Close()
			defer a2.Close()
			defer link1.Restore()
			defer link2.Restore()
			k1, k2 := key(t, fmt.Sprintf("hang%d-release", i)), key(t, fmt.Sprintf("hang%d-close", i))
			granted := time.Now()
			l1, err := a1.Acquire(ctxFor(t, 30*time.Second), k1, dlock.WithTTL(ttl), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire before the hang: %v", i, err)
			}
			if _, err := a2.Acquire(ctxFor(t, 30*time.Second), k2, dlock.WithTTL(ttl), dlock.WithAutoRenew()); err != nil {
				t.Fatalf("trial %d: acquire before the hang: %v", i, err)
			}
			doneAt := make(chan time.Time, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				select {
				case <-l1.Done():
					doneAt <- time.Now()
				case <-stop:
				}
			}()
			link1.Blackhole()
			link2.Blackhole()
			sleepUntil(granted.Add(ttl/3 + ttl/10)) // a renewal (at TTL/3) is on its way and hangs

			ctx, cancel := context.WithTimeout(context.Background(), hangReleaseCtx)
			t0 := time.Now()
			err = l1.Release(ctx)
			took := time.Since(t0)
			cancel()
			releases = append(releases, took)
			switch {
			case took > hangReleaseCtx+hangSlack:
				violation("trial %d: Release with a %v context took %v while the store did not answer", i, hangReleaseCtx, took.Round(time.Millisecond))
			case err == nil:
				violation("trial %d: Release returned nil while the store did not answer", i)
			}

			t0 = time.Now()
			_ = a2.Close()
			took = time.Since(t0)
			closes = append(closes, took)
			if took > closeBound+hangSlack {
				violation("trial %d: Close took %v while the store did not answer (bound %v)", i, took.Round(time.Millisecond), closeBound)
			}

			deadline := granted.Add(doneBound)
			var at time.Time
			timer := time.NewTimer(max(time.Until(deadline.Add(hangSlack)), 0))
			select {
			case at = <-doneAt:
			case <-timer.C:
				select { // the time Done closed decides, not which channel was read first
				case at = <-doneAt:
				default:
				}
			}
			timer.Stop()
			switch {
			case at.IsZero():
				violation("trial %d: Done still open %v after the grant (bound %v): the holder still believes it holds the lock", i, time.Since(granted).Round(time.Millisecond), doneBound)
			case at.After(deadline.Add(hangSlack)):
				violation("trial %d: Done closed %v after the grant, past the %v bound", i, at.Sub(granted).Round(time.Millisecond), doneBound)
			default:
				dones = append(dones, at.Sub(granted))
			}

			link1.Restore()
			link2.Restore()
			back := time.Now()
			for _, k := range []string{k1, k2} {
				ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k)
				if err != nil {
					violation("trial %d: %s not free within %v after the store came back: %v", i, k, f.freeBound(ttl), err)
					continue
				}
				frees = append(frees, time.Since(back))
				backs = append(backs, back.Sub(granted))
				_ = ls.Release(ctxFor(t, 10*time.Second))
			}
		}()
		if len(bad) > 0 {
			c.Violations++
			for _, v := range bad {
				c.Note("%s", v)
			}
		}
	}
	done := "never within the bound"
	if len(dones) > 0 {
		done = maxOrZero(dones).Round(time.Millisecond).String() + " after the grant"
	}
	c.Note("Release with a %v context returned in at most %v; Close in at most %v; Done closed %s (bound %v); both locks granted to another client within %v of the store answering again (which was %v after the grant)",
		hangReleaseCtx, slices.Max(releases).Round(time.Millisecond), slices.Max(closes).Round(time.Millisecond),
		done, doneBound, maxOrZero(frees).Round(time.Millisecond), maxOrZero(backs).Round(time.Millisecond))
}

func maxOrZero(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}

// failoverFencing: a holder is granted a token on the master while its replica
// lags; the replica is promoted; the next grant must get a larger token. A store
// whose counter lost the increment hands the same token out again.
func (f *faults) failoverFencing(t *testing.T, c *results.Cell) {
	c.Property = string(spec.FencingMonotonic)
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("failover-fence%d", i))
		fo.PauseReplication(t)
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		if err == nil {
			_ = la.Release(ctxFor(t, 10*time.Second)) // consecutive grants: no overlap here
		}
		fo.Failover(t)
		if err != nil {
			c.Note("trial %d: no grant while the replica lagged: %v", i, err)
			continue
		}
		lb, err := b.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			c.Note("trial %d: no grant after the failover: %v", i, err)
			continue
		}
		if lb.Token() <= la.Token() {
			c.Violation("trial %d: token %d granted after the failover, not above the %d granted before it", i, lb.Token(), la.Token())
		} else {
			c.Note("trial %d: tokens %d, then %d after the failover", i, la.Token(), lb.Token())
		}
		_ = lb.Release(ctxFor(t, 10*time.Second))
	}
}

// clockJumpBareMajority is Kleppmann's counterexample to Redlock: two of five nodes
// are down while a client is granted the lock (so it stands on a bare majority of
// three), they come back, then one of the three jumps its clock past the TTL; a
// second client asks. The store's own clocks decide, so the second client finds a
// majority free while the first lease is live.
func (f *faults) clockJumpBareMajority(t *testing.T, c *results.Cell) {
	nf := f.h.(NodeFaulter)
	n := nf.Nodes()
	quorum := n/2 + 1
	a, b := f.client(t), f.client(t)
	const ttl = 30 * time.Second
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("kleppmann%d", i))
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
		if err != nil {
			t.Fatalf("trial %d: grant on a bare majority of %d of %d nodes: %v", i, quorum, n, err)
		}
		nf.JumpNodeClock(t, quorum-1, 2*ttl)
		lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))

		switch {
		case err == nil && isDone(la):
			c.Note("trial %d: granted again, but only after the first lease ended (%v)", i, la.Err())
		case err == nil:
			c.Violation("trial %d: the first lease (TTL %v, still live) stood on nodes 0-%d; after node %d's clock jumped %v, a second client was granted the lock",
				i, ttl, quorum-1, quorum-1, 2*ttl)
		case errors.Is(err, dlock.ErrNotAcquired):
			c.Note("trial %d: refused after the jump: %v", i, err)
		default:
			t.Fatalf("trial %d: %v", i, err)
		}
		if lb != nil {
			_ = lb.Release(ctxFor(t, 10*time.Second))
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
	}
}

// leaderKillLease reports the second fact of the leader kill's trials (leaderKill
// measures both): whether a lease held across the kill was kept.
func (f *faults) leaderKillLease(t *testing.T, c *results.Cell) {
	if f.leaseFact == nil {
		t.Skipf("%s is measured by the %s trials: run them too", spec.LeaderKillLease, spec.LeaderKill)
	}
	c.Property, c.Trials, c.Violations, c.Evidence = f.leaseFact.Property, f.leaseFact.Trials, f.leaseFact.Violations, f.leaseFact.Evidence
}

// waiterCrash: while a lock is held, a waiter in a child process queues for it, a
// second waiter queues behind it, the first waiter's process gets SIGKILL, and the
// holder releases. The second waiter must be granted within the bound a dead holder's
// lock gets (freeBound: the TTL, or the session timeout, plus slack): a dead waiter
// must not block the queue for longer than its own TTL. Where the harness can see the
// store's queue (a FIFO backend's QueueInspector) the two are seen queued in that
// order; elsewhere each is given a moment to start waiting.
func (f *faults) waiterCrash(t *testing.T, c *results.Cell) {
	c.Property = string(spec.DeadlockFreedom)
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
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("waiter-crash%d", i))
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("trial %d: the holder: %v", i, err)
		}
		ch := startWaiter(t, url, k, ttl, "crashing-waiter")
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
		killed := time.Now()
		if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("trial %d: the holder's Release: %v", i, err)
		}
		if err := <-got; err != nil {
			c.Violation("trial %d: the waiter behind a crashed waiter was not served within %v (waiter TTL %v, session timeout %v): %v",
				i, f.freeBound(ttl), ttl, f.caps.SessionTimeout, err)
			continue
		}
		served = append(served, time.Since(killed))
	}
	if len(served) > 0 {
		c.Note("the waiter behind the crashed one was served %v after the SIGKILL (waiter TTL %v, session timeout %v)", served, ttl, f.caps.SessionTimeout)
	}
}
