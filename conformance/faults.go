package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

var trialsFlag = flag.Int("faults.trials", 0, "trials per fault scenario (default 3, or $DLOCK_FAULT_TRIALS)")

// defaultTrials is the number of trials per scenario: -faults.trials, else
// $DLOCK_FAULT_TRIALS, else 3.
func defaultTrials() int {
	if *trialsFlag > 0 {
		return *trialsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("DLOCK_FAULT_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// trials is how many trials RunFaults gives s: defaultTrials(), or more if FaultTrials asks.
func trials(c spec.Capabilities, s spec.Scenario) int { return max(defaultTrials(), c.FaultTrials[s]) }

// RunFaults runs every scenario (spec.Scenarios) that the harness enables, as named
// subtests, each for several trials (3, or -faults.trials, or $DLOCK_FAULT_TRIALS;
// more where the declaration's FaultTrials asks). A scenario the harness does not
// enable is skipped and reported not applicable. An outcome that differs from what
// the declaration expects (spec.Capabilities.Expect) fails the subtest.
func RunFaults(t *testing.T, h Harness) {
	caps := h.Capabilities()
	backend := h.Name()
	own := &results.File{Trials: defaultTrials()}
	results.SaveAtEnd(t, "faults", backend, own)
	f := &faults{h: h, caps: caps, backend: backend, trials: defaultTrials(), own: own}
	_, url := h.(URLer)
	_, restart := h.(ServerRestarter)
	_, fo := h.(Failoverer)
	_, part := h.(Partitioner)
	_, nodes := h.(NodeStopper)
	_, leader := h.(LeaderKiller)
	_, clock := h.(ClockJumper)
	_, nodeFaults := h.(NodeFaulter)
	for _, x := range append([]run{
		{spec.HolderCrash, url, f.holderCrash},
		{spec.WaiterCrash, url, f.waiterCrash},
		{spec.HolderPause, url, func(t *testing.T, c *results.Cell) { f.holderPause(t, c, false) }},
		{spec.HolderPauseFenced, url, func(t *testing.T, c *results.Cell) { f.holderPause(t, c, true) }},
		{spec.ServerRestart, restart, f.serverRestart},
		{spec.Failover, fo, f.failover},
		{spec.FailoverFencing, fo, f.failoverFencing},
		{spec.Partition, part, f.partition},
		{spec.StoreHang, part, f.storeHang},
		{spec.QuorumLoss, nodes, f.quorumLoss},
		{spec.LeaderKill, leader, f.leaderKill},
		{spec.LeaderKillLease, leader, f.leaderKillLease},
		{spec.ClockJump, clock, f.clockJump},
		{spec.ClockJumpBareMajority, nodeFaults, f.clockJumpBareMajority},
	}, primitiveFaults(f)...) {
		t.Run(string(x.s), func(t *testing.T) {
			c := results.Cell{Backend: backend, Scenario: string(x.s), Property: string(spec.MutualExclusion), Expected: caps.Expect(x.s)}
			if !x.ok || c.Expected == spec.NotApplicable {
				c.Status, c.Expected = spec.NotApplicable, spec.NotApplicable
				f.add(c)
				if x.ok {
					t.Skipf("%s: not applicable to this backend (as declared: it has no fencing tokens)", x.s)
				}
				t.Skipf("%s: the harness does not enable this scenario", x.s)
			}
			f.trials = trials(caps, x.s)
			x.fn(t, &c)
			if t.Failed() {
				return
			}
			if c.Status == "" {
				c.Status = spec.Held
				if c.Violations > 0 {
					c.Status = spec.Violated
				}
			}
			f.add(c)
			if c.Surprise() {
				t.Errorf("%s on %s: %s, but the backend's capabilities expect %s; evidence: %v", x.s, backend, c.Status, c.Expected, c.Evidence)
			} else {
				t.Logf("%s: %s as expected; %v", x.s, c.ShortStatus(), c.Evidence)
			}
		})
	}
}

// primitiveFaults returns the fault scenarios of the primitives beyond the mutex
// (each file of a primitive appends a maker in init). A maker returns nothing for a
// backend that does not declare its primitive.
func primitiveFaults(f *faults) []run {
	var out []run
	for _, m := range primitiveFaultMakers {
		out = append(out, m(f)...)
	}
	return out
}

var primitiveFaultMakers []func(f *faults) []run

// run is one scenario of RunFaults: its name, whether the harness enables it, and
// the function that runs its trials and fills the cell.
type run struct {
	s  spec.Scenario
	ok bool
	fn func(*testing.T, *results.Cell)
}

type faults struct {
	h         Harness
	caps      spec.Capabilities
	backend   string
	trials    int
	own       *results.File // saved to $DLOCK_REPORT_DIR
	leaseFact *results.Cell // LeaderKillLease, measured by leaderKill
}

func (f *faults) add(c results.Cell) { f.own.Add(c) }

func (f *faults) client(t testing.TB) dlock.Locker {
	l := f.h.NewLocker(t)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// leaseTTL is the TTL fault scenarios give their leases: long enough for a child
// process to start and be signalled, short enough to wait out.
func (f *faults) leaseTTL() time.Duration { return max(f.caps.MinTTL, 2*time.Second) }

// freeBound is how long a dead holder's lock may take to free. For a session store
// it is capped at a minute: a store that keeps a silent holder's lock for hours
// (GET_LOCK's default wait_timeout is 8h) shows it by keeping it that minute.
func (f *faults) freeBound(ttl time.Duration) time.Duration {
	if f.caps.PerLeaseTTL {
		return ttl + 10*time.Second
	}
	return min(f.caps.SessionTimeout+10*time.Second, time.Minute)
}

func (f *faults) holderCrash(t *testing.T, c *results.Cell) {
	c.Property = string(spec.DeadlockFreedom)
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	var freed []time.Duration
	for i := range f.trials {
		k := key(t, fmt.Sprintf("crash%d", i))
		ch := startHolder(t, url, k, ttl, "", "child")
		ch.signal(syscall.SIGKILL)
		killed := time.Now()
		if f.caps.PerLeaseTTL {
			if ls, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); err == nil {
				at := time.Since(ch.start)
				_ = ls.Release(ctxFor(t, 10*time.Second))
				if at < ttl-tolerance {
					c.Violation("trial %d: granted right after the holder's death, %v into its %v TTL", i, at, ttl)
					continue
				}
			}
		}
		c.Trials++
		ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k)
		if err != nil {
			c.Violation("trial %d: the dead holder's lock was not freed within %v: %v", i, f.freeBound(ttl), err)
			continue
		}
		granted := time.Now()
		if f.caps.PerLeaseTTL && granted.Sub(ch.start) < ttl-2*time.Millisecond {
			c.Violation("trial %d: granted %v after the dead holder began to acquire, before its %v TTL", i, granted.Sub(ch.start), ttl)
		}
		freed = append(freed, granted.Sub(killed))
		_ = ls.Release(ctxFor(t, 10*time.Second))
	}
	c.Trials = f.trials
	if len(freed) > 0 {
		c.Note("lock freed %v after SIGKILL (ttl %v, session timeout %v)", freed, ttl, f.caps.SessionTimeout)
	}
}

func (f *faults) holderPause(t *testing.T, c *results.Cell, fenced bool) {
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	for i := range f.trials {
		c.Trials++
		res := NewResource(fenced)
		srv, err := newResourceServer(res)
		if err != nil {
			t.Fatal(err)
		}
		k := key(t, fmt.Sprintf("pause%d", i))
		ch := startHolder(t, url, k, ttl, srv.Addr(), "paused-holder")
		ch.signal(syscall.SIGSTOP)
		ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k)
		if err != nil {
			ch.kill()
			srv.Close()
			f.keptLock(t, c, i, "paused", ttl, err)
			return
		}
		res.Enter("new-holder", ls.Token())
		ch.signal(syscall.SIGCONT)
		ch.send("WRITE")
		ans := ch.expect("WROTE", time.Minute)
		res.Leave("new-holder")
		_ = ls.Release(ctxFor(t, 10*time.Second))
		ch.kill()
		srv.Close()
		if ans == "WROTE OK" {
			c.Violation("trial %d: the resumed holder (token %d) wrote while the new holder (token %d) held the lock", i, ch.token, ls.Token())
		} else {
			c.Note("trial %d: stale write of token %d refused (new token %d)", i, ch.token, ls.Token())
		}
	}
}

// keptLock records that a silent (paused or cut-off) holder's lock was not freed
// within the bound in trial i; the caller then skips the remaining trials. With a
// per-lease TTL that is a failure. A session store that keeps the lock of a holder
// whose connection is still open keeps it in every trial: waiting out the bound
// again would show nothing new.
func (f *faults) keptLock(t *testing.T, c *results.Cell, i int, holder string, ttl time.Duration, err error) {
	if f.caps.PerLeaseTTL {
		t.Errorf("trial %d: the %s holder's lock was not freed within %v, though its TTL is %v: %v", i, holder, f.freeBound(ttl), ttl, err)
		return
	}
	c.Note("trial %d: the %s holder kept the lock for %v (not granted to another: %v); the remaining %d trials are skipped: the store keeps the lock of a connection it still sees open", i, holder, f.freeBound(ttl), err, f.trials-i-1)
}

// grantWhileLive tries to acquire k from b (retrying while the backend is
// unavailable, up to within) and reports whether it was granted while la — another
// owner's lease — had not ended. It releases what it gets.
func grantWhileLive(t testing.TB, b dlock.Locker, k string, la dlock.Lease, within time.Duration) (granted, whileLive bool, unavailable time.Duration, err error) {
	deadline := time.Now().Add(within)
	start := time.Now()
	for {
		ls, err := b.TryAcquire(ctxFor(t, 5*time.Second), k, dlock.WithTTL(30*time.Second))
		if err == nil {
			live := !isDone(la)
			_ = ls.Release(ctxFor(t, 10*time.Second))
			return true, live, 0, nil
		}
		if errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
			return false, false, 0, nil
		}
		if time.Now().After(deadline) {
			return false, false, time.Since(start), err
		}
		time.Sleep(100 * time.Millisecond) // the servers are coming back; poll them
	}
}

func (f *faults) heldThroughFault(t *testing.T, c *results.Cell, fault func(i int)) {
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("fault%d", i))
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			c.Note("trial %d: the first holder was not granted: %v", i, err)
			fault(i)
			continue
		}
		fault(i)
		granted, live, unavail, err := grantWhileLive(t, b, k, la, 30*time.Second)
		switch {
		case granted && live:
			c.Violation("trial %d: a second client was granted the lock while the first lease (token %d) was live", i, la.Token())
		case granted:
			c.Note("trial %d: the first lease ended (%v) before the second grant", i, la.Err())
		case err != nil:
			c.Unavailable = max(c.Unavailable, unavail)
			c.Note("trial %d: unavailable for %v: %v", i, unavail.Round(time.Millisecond), err)
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
	}
}

func (f *faults) serverRestart(t *testing.T, c *results.Cell) {
	r := f.h.(ServerRestarter)
	f.heldThroughFault(t, c, func(int) { r.RestartServers(t) })
}

func (f *faults) failover(t *testing.T, c *results.Cell) {
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("failover%d", i))
		fo.PauseReplication(t)
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		fo.Failover(t)
		if err != nil {
			c.Note("trial %d: the first holder was not granted before the failover: %v", i, err)
			continue
		}
		granted, live, unavail, gerr := grantWhileLive(t, b, k, la, 30*time.Second)
		switch {
		case granted && live:
			c.Violation("trial %d: the promoted replica granted the lock again while the first lease (token %d) was live", i, la.Token())
		case gerr != nil:
			c.Unavailable = max(c.Unavailable, unavail)
			c.Note("trial %d: unavailable after failover: %v", i, gerr)
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
	}
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

func (f *faults) partition(t *testing.T, c *results.Cell) {
	p := f.h.(Partitioner)
	b := f.client(t)
	ttl := f.leaseTTL()
	first, kept := true, false
	for i := range f.trials {
		if kept {
			break
		}
		c.Trials++
		func() {
			a, link := p.NewPartitionedLocker(t)
			defer a.Close()
			defer link.Restore()
			k := key(t, fmt.Sprintf("partition%d", i))
			la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(ttl), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire before the partition: %v", i, err)
			}
			doneAt := make(chan time.Time, 1)
			stop := make(chan struct{})
			defer close(stop) // a lease that never ends must not keep this goroutine
			go func() {
				select {
				case <-la.Done():
					doneAt <- time.Now()
				case <-stop:
				}
			}()
			link.Blackhole()
			ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k)
			grantedAt := time.Now()
			if err != nil {
				f.keptLock(t, c, i, "cut-off", ttl, err)
				kept = true
				return
			}
			defer func() { _ = ls.Release(ctxFor(t, 10*time.Second)) }()
			select {
			case end := <-doneAt:
				margin := grantedAt.Sub(end)
				if first || margin < c.Margin {
					c.Margin, first = margin, false
				}
			default:
				c.Violation("trial %d: granted to another client while the cut-off holder's lease (token %d) had not ended", i, la.Token())
			}
		}()
	}
	if !first {
		c.Note("the cut-off holder's lease ended at least %v before the next grant", c.Margin)
	}
}

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

func (f *faults) quorumLoss(t *testing.T, c *results.Cell) {
	ns := f.h.(NodeStopper)
	c.Property = "Availability"
	l := f.client(t)
	n := ns.Nodes()
	minority, majority := (n-1)/2, n/2+1
	t.Cleanup(func() { ns.RestartNodes(t) })
	for i := range f.trials {
		c.Trials++
		ns.StopNodes(t, minority)
		if err := cycle(t, l, key(t, fmt.Sprintf("quorum-minority%d", i))); err != nil {
			c.Violation("trial %d: %d of %d nodes down (a majority up): not granted: %v", i, minority, n, err)
		}
		ns.StopNodes(t, majority)
		start := time.Now()
		_, err := l.Acquire(ctxFor(t, 30*time.Second), key(t, fmt.Sprintf("quorum-majority%d", i)), dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(10*time.Millisecond), 2)))
		took := time.Since(start)
		switch {
		case err == nil:
			c.Violation("trial %d: %d of %d nodes down: granted without a quorum", i, majority, n)
		case !errors.Is(err, dlock.ErrUnavailable):
			c.Violation("trial %d: %d of %d nodes down: want ErrUnavailable, got %v", i, majority, n, err)
		default:
			c.Note("trial %d: ErrUnavailable after %v with %d of %d down", i, took.Round(time.Millisecond), majority, n)
		}
		ns.RestartNodes(t)
	}
}

func cycle(t testing.TB, l dlock.Locker, k string) error {
	ls, err := l.Acquire(ctxFor(t, 30*time.Second), k)
	if err != nil {
		return err
	}
	return ls.Release(ctxFor(t, 10*time.Second))
}

func (f *faults) leaderKill(t *testing.T, c *results.Cell) {
	lk := f.h.(LeaderKiller)
	const clients = 4
	// The other fact of a leader kill: does a lease held across it survive?
	lease := &results.Cell{Property: "LeaseKept"}
	f.leaseFact = lease
	holder := f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("leader%d", i))
		held, err := holder.Acquire(ctxFor(t, 30*time.Second), key(t, fmt.Sprintf("leader-held%d", i)), dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
		if err != nil {
			t.Fatalf("trial %d: acquire the lease held across the kill: %v", i, err)
		}
		res := NewResource(false)
		g := &grantLog{signal: make(chan struct{}, 1)}
		var tokens struct {
			sync.Mutex
			last  uint64
			stale []string
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		done := make(chan struct{}, clients)
		for j := range clients {
			l := f.client(t)
			go func() {
				defer func() { done <- struct{}{} }()
				name := fmt.Sprintf("client%d", j)
				for ctx.Err() == nil {
					lease, err := l.Acquire(ctx, k, dlock.WithTTL(f.leaseTTL()))
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(50 * time.Millisecond) // the cluster is electing; ask again
						}
						continue
					}
					res.Enter(name, lease.Token())
					if f.caps.Fencing { // grants follow one another: so must tokens
						tokens.Lock()
						if lease.Token() <= tokens.last {
							tokens.stale = append(tokens.stale, fmt.Sprintf("%s granted token %d after token %d", name, lease.Token(), tokens.last))
						}
						tokens.last = max(tokens.last, lease.Token())
						tokens.Unlock()
					}
					g.add(time.Now())
					time.Sleep(time.Millisecond) // the critical section's work
					res.Leave(name)
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
					_ = lease.Release(rctx) // may fail mid-election: the lease then expires
					rcancel()
				}
			}()
		}
		_, ok := g.waitFor(20, time.Time{}, 30*time.Second)
		if !ok {
			cancel()
			t.Fatalf("trial %d: fewer than 20 grants in 30s before the leader kill", i)
		}
		lk.KillLeader(t)
		killed := time.Now() // KillLeader returns once the leader is dead
		resumed, ok := g.waitFor(20, killed, 45*time.Second)
		cancel()
		for range clients {
			<-done
		}
		if !ok {
			c.Status = spec.Unavailable
			c.Note("trial %d: the lock service did not resume within 45s of the leader's death", i)
			if d, isD := f.h.(Diagnoser); isD {
				c.Note("trial %d: the store then: %s", i, d.Diagnose(t, k))
			}
		} else {
			c.Unavailable = max(c.Unavailable, resumed.Sub(killed))
		}
		// Give a client that lost its connection with the leader the time it takes to
		// conclude (a third of a session timeout, a renewal period), then look.
		time.Sleep(time.Second)
		lease.Trials++
		if err := held.Err(); err != nil {
			lease.Violation("trial %d: the lease held across the leader kill ended: %v", i, err)
		} else {
			lease.Note("trial %d: the lease held across the leader kill was kept", i)
		}
		_ = held.Release(ctxFor(t, 10*time.Second))
		for _, o := range res.Overlaps() {
			c.Violation("trial %d: %s", i, o)
		}
		for _, s := range tokens.stale {
			c.Violation("trial %d: fencing token did not increase across the leader change: %s", i, s)
		}
	}
	c.Note("first grant after the leader kill came within %v", c.Unavailable.Round(time.Millisecond))
}

// leaderKillLease reports the second fact of the leader kill's trials (leaderKill
// measures both): whether a lease held across the kill was kept.
func (f *faults) leaderKillLease(t *testing.T, c *results.Cell) {
	if f.leaseFact == nil {
		t.Skipf("%s is measured by the %s trials: run them too", spec.LeaderKillLease, spec.LeaderKill)
	}
	c.Property, c.Trials, c.Violations, c.Evidence = f.leaseFact.Property, f.leaseFact.Trials, f.leaseFact.Violations, f.leaseFact.Evidence
}

// grantLog records when grants happened and signals each one.
type grantLog struct {
	mu     sync.Mutex
	at     []time.Time
	signal chan struct{}
}

func (g *grantLog) add(at time.Time) {
	g.mu.Lock()
	g.at = append(g.at, at)
	g.mu.Unlock()
	select {
	case g.signal <- struct{}{}:
	default:
	}
}

// waitFor waits until n grants happened after since and returns the first of them.
func (g *grantLog) waitFor(n int, since time.Time, within time.Duration) (time.Time, bool) {
	timeout := time.After(within)
	for {
		g.mu.Lock()
		var after []time.Time
		for _, at := range g.at {
			if at.After(since) {
				after = append(after, at)
			}
		}
		g.mu.Unlock()
		if len(after) >= n {
			return after[0], true
		}
		select {
		case <-g.signal:
		case <-timeout:
			return time.Time{}, false
		}
	}
}

func (f *faults) clockJump(t *testing.T, c *results.Cell) {
	cj := f.h.(ClockJumper)
	f.heldThroughFault(t, c, func(int) { cj.JumpClock(t, 2*time.Minute) })
}
