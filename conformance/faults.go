package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
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
	for _, x := range append([]run{
		{spec.HolderCrash, url, f.holderCrash},
		{spec.HolderPause, url, func(t *testing.T, c *results.Cell) { f.holderPause(t, c, false) }},
		{spec.HolderPauseFenced, url, func(t *testing.T, c *results.Cell) { f.holderPause(t, c, true) }},
		{spec.ServerRestart, restart, f.serverRestart},
		{spec.Failover, fo, f.failover},
		{spec.Partition, part, f.partition},
		{spec.QuorumLoss, nodes, f.quorumLoss},
		{spec.LeaderKill, leader, f.leaderKill},
		{spec.ClockJump, clock, f.clockJump},
	}, primitiveFaults(f)...) {
		t.Run(string(x.s), func(t *testing.T) {
			c := results.Cell{Backend: backend, Scenario: string(x.s), Property: string(spec.MutualExclusion), Expected: caps.Expect(x.s)}
			if !x.ok {
				c.Status, c.Expected = spec.NotApplicable, spec.NotApplicable
				f.add(c)
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
	h       Harness
	caps    spec.Capabilities
	backend string
	trials  int
	own     *results.File // saved to $DLOCK_REPORT_DIR
	// childEnv is added to the environment of holder children (a primitive's
	// scenarios make them hold something else than a mutex).
	childEnv []string
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

// freeBound is how long a dead holder's lock may take to free.
func (f *faults) freeBound(ttl time.Duration) time.Duration {
	if f.caps.PerLeaseTTL {
		return ttl + 10*time.Second
	}
	return f.caps.SessionTimeout + 10*time.Second
}

func (f *faults) holderCrash(t *testing.T, c *results.Cell) {
	c.Property = string(spec.DeadlockFreedom)
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	var freed []time.Duration
	for i := range f.trials {
		k := key(t, fmt.Sprintf("crash%d", i))
		ch := startHolder(t, url, k, ttl, "", "child", f.childEnv...)
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
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("leader%d", i))
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
		for _, o := range res.Overlaps() {
			c.Violation("trial %d: %s", i, o)
		}
		for _, s := range tokens.stale {
			c.Violation("trial %d: fencing token did not increase across the leader change: %s", i, s)
		}
	}
	c.Note("first grant after the leader kill came within %v", c.Unavailable.Round(time.Millisecond))
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
