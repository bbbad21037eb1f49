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
)

// Scenario names a fault that RunFaults injects.
type Scenario string

// The fault scenarios, each enabled by an optional harness interface.
const (
	HolderCrash       Scenario = "HolderCrash"       // URLer: the holder process gets SIGKILL
	HolderPause       Scenario = "HolderPause"       // URLer: the holder is SIGSTOPped past its TTL, then writes (unfenced resource)
	HolderPauseFenced Scenario = "HolderPauseFenced" // the same, against a resource that checks fencing tokens
	ServerRestart     Scenario = "ServerRestart"     // ServerRestarter: every server restarts while a lock is held
	Failover          Scenario = "Failover"          // Failoverer: a lagging replica is promoted while a lock is held
	Partition         Scenario = "Partition"         // Partitioner: the holder's link is blackholed
	QuorumLoss        Scenario = "QuorumLoss"        // NodeStopper: a minority, then a majority of nodes stop
	LeaderKill        Scenario = "LeaderKill"        // LeaderKiller: the cluster leader dies under contention (no overlap; tokens keep increasing)
	ClockJump         Scenario = "ClockJump"         // ClockJumper: the server's clock jumps forward
)

// Scenarios lists every scenario in the order RunFaults runs them.
var Scenarios = []Scenario{HolderCrash, HolderPause, HolderPauseFenced, ServerRestart, Failover, Partition, QuorumLoss, LeaderKill, ClockJump}

// URLer is implemented by a harness whose backend can be opened by URL from another
// process (the test binary must call ChildMain from TestMain).
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

// Diagnoser is implemented by a harness that can describe the store's state of a
// key (its queue, who owns what) for the evidence of a scenario that went wrong,
// e.g. a lock service that did not resume after a leader kill.
type Diagnoser interface {
	Diagnose(t testing.TB, key string) string
}

// ClockJumper moves the server's clock (one server's, for multi-node backends)
// forward by d.
type ClockJumper interface {
	JumpClock(t testing.TB, d time.Duration)
}

var trialsFlag = flag.Int("faults.trials", 0, "trials per fault scenario (default 3, or $DLOCK_FAULT_TRIALS)")

// Trials is the number of trials per scenario: -faults.trials, else
// $DLOCK_FAULT_TRIALS, else 3.
func Trials() int {
	if *trialsFlag > 0 {
		return *trialsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("DLOCK_FAULT_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// expected returns what the Capabilities predict for s.
func (c Capabilities) expected(s Scenario) Status {
	if st, ok := c.FaultOutcomes[s]; ok {
		return st
	}
	switch s {
	case HolderPause:
		return Violated // no lease survives a pause of its holder without fencing
	case HolderPauseFenced:
		if c.Fencing {
			return Held
		}
		return Violated
	}
	return Held
}

// trials is how many trials RunFaults gives s: Trials(), or more if FaultTrials asks.
func (c Capabilities) trials(s Scenario) int { return max(Trials(), c.FaultTrials[s]) }

// RunFaults runs every scenario the harness enables, Trials() times each, as named
// subtests, and adds one Cell per scenario to r (which may be nil). An outcome that
// differs from the expectation (Capabilities.FaultOutcomes, or the defaults: every
// guarantee holds, except that an unfenced resource sees a paused holder's write)
// fails the subtest.
func RunFaults(t *testing.T, backend string, h Harness, r *Report) {
	caps := h.Capabilities()
	own := &Report{Trials: Trials()}
	saveAtEnd(t, "faults", backend, own)
	f := &faults{h: h, caps: caps, backend: backend, trials: Trials(), report: r, own: own}
	type run struct {
		s  Scenario
		ok bool
		fn func(*testing.T, *Cell)
	}
	_, url := h.(URLer)
	_, restart := h.(ServerRestarter)
	_, fo := h.(Failoverer)
	_, part := h.(Partitioner)
	_, nodes := h.(NodeStopper)
	_, leader := h.(LeaderKiller)
	_, clock := h.(ClockJumper)
	for _, x := range []run{
		{HolderCrash, url, f.holderCrash},
		{HolderPause, url, func(t *testing.T, c *Cell) { f.holderPause(t, c, false) }},
		{HolderPauseFenced, url, func(t *testing.T, c *Cell) { f.holderPause(t, c, true) }},
		{ServerRestart, restart, f.serverRestart},
		{Failover, fo, f.failover},
		{Partition, part, f.partition},
		{QuorumLoss, nodes, f.quorumLoss},
		{LeaderKill, leader, f.leaderKill},
		{ClockJump, clock, f.clockJump},
	} {
		t.Run(string(x.s), func(t *testing.T) {
			c := Cell{Backend: backend, Scenario: string(x.s), Property: string(MutualExclusion), Expected: caps.expected(x.s)}
			if !x.ok {
				c.Status, c.Expected = NotApplicable, NotApplicable
				f.add(c)
				t.Skipf("%s: the harness does not enable this scenario", x.s)
			}
			f.trials = caps.trials(x.s)
			x.fn(t, &c)
			if t.Failed() {
				return
			}
			if c.Status == "" {
				c.Status = Held
				if c.Violations > 0 {
					c.Status = Violated
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

type faults struct {
	h       Harness
	caps    Capabilities
	backend string
	trials  int
	report  *Report
	own     *Report // saved to $DLOCK_REPORT_DIR
}

func (f *faults) add(c Cell) {
	f.own.Add(c)
	if f.report != nil {
		f.report.Add(c)
	}
}

func (f *faults) client(t testing.TB) dlock.Locker {
	l := f.h.NewLocker(t)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// note adds evidence, keeping a few items.
func (c *Cell) note(format string, args ...any) {
	if len(c.Evidence) < 6 {
		c.Evidence = append(c.Evidence, fmt.Sprintf(format, args...))
	}
}

func (c *Cell) violation(format string, args ...any) {
	c.Violations++
	c.note(format, args...)
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

func (f *faults) holderCrash(t *testing.T, c *Cell) {
	c.Property = string(DeadlockFreedom)
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
					c.violation("trial %d: granted right after the holder's death, %v into its %v TTL", i, at, ttl)
					continue
				}
			}
		}
		c.Trials++
		ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k)
		if err != nil {
			c.violation("trial %d: the dead holder's lock was not freed within %v: %v", i, f.freeBound(ttl), err)
			continue
		}
		granted := time.Now()
		if f.caps.PerLeaseTTL && granted.Sub(ch.start) < ttl-2*time.Millisecond {
			c.violation("trial %d: granted %v after the dead holder began to acquire, before its %v TTL", i, granted.Sub(ch.start), ttl)
		}
		freed = append(freed, granted.Sub(killed))
		_ = ls.Release(ctxFor(t, 10*time.Second))
	}
	c.Trials = f.trials
	if len(freed) > 0 {
		c.note("lock freed %v after SIGKILL (ttl %v, session timeout %v)", freed, ttl, f.caps.SessionTimeout)
	}
}

func (f *faults) holderPause(t *testing.T, c *Cell, fenced bool) {
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	for i := range f.trials {
		c.Trials++
		res := NewResource(fenced)
		srv, err := NewResourceServer(res)
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
			c.violation("trial %d: the resumed holder (token %d) wrote while the new holder (token %d) held the lock", i, ch.token, ls.Token())
		} else {
			c.note("trial %d: stale write of token %d refused (new token %d)", i, ch.token, ls.Token())
		}
	}
}

// keptLock records that a silent (paused or cut-off) holder's lock was not freed
// within the bound in trial i; the caller then skips the remaining trials. With a
// per-lease TTL that is a failure. A session store that keeps the lock of a holder
// whose connection is still open keeps it in every trial: waiting out the bound
// again would show nothing new.
func (f *faults) keptLock(t *testing.T, c *Cell, i int, holder string, ttl time.Duration, err error) {
	if f.caps.PerLeaseTTL {
		t.Errorf("trial %d: the %s holder's lock was not freed within %v, though its TTL is %v: %v", i, holder, f.freeBound(ttl), ttl, err)
		return
	}
	c.note("trial %d: the %s holder kept the lock for %v (not granted to another: %v); the remaining %d trials are skipped: the store keeps the lock of a connection it still sees open", i, holder, f.freeBound(ttl), err, f.trials-i-1)
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

func (f *faults) heldThroughFault(t *testing.T, c *Cell, fault func(i int)) {
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("fault%d", i))
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			c.note("trial %d: the first holder was not granted: %v", i, err)
			fault(i)
			continue
		}
		fault(i)
		granted, live, unavail, err := grantWhileLive(t, b, k, la, 30*time.Second)
		switch {
		case granted && live:
			c.violation("trial %d: a second client was granted the lock while the first lease (token %d) was live", i, la.Token())
		case granted:
			c.note("trial %d: the first lease ended (%v) before the second grant", i, la.Err())
		case err != nil:
			c.Unavailable = max(c.Unavailable, unavail)
			c.note("trial %d: unavailable for %v: %v", i, unavail.Round(time.Millisecond), err)
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
	}
}

func (f *faults) serverRestart(t *testing.T, c *Cell) {
	r := f.h.(ServerRestarter)
	f.heldThroughFault(t, c, func(int) { r.RestartServers(t) })
}

func (f *faults) failover(t *testing.T, c *Cell) {
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("failover%d", i))
		fo.PauseReplication(t)
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(30*time.Second))
		fo.Failover(t)
		if err != nil {
			c.note("trial %d: the first holder was not granted before the failover: %v", i, err)
			continue
		}
		granted, live, unavail, gerr := grantWhileLive(t, b, k, la, 30*time.Second)
		switch {
		case granted && live:
			c.violation("trial %d: the promoted replica granted the lock again while the first lease (token %d) was live", i, la.Token())
		case gerr != nil:
			c.Unavailable = max(c.Unavailable, unavail)
			c.note("trial %d: unavailable after failover: %v", i, gerr)
		}
		_ = la.Release(ctxFor(t, 10*time.Second))
	}
}

func (f *faults) partition(t *testing.T, c *Cell) {
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
				c.violation("trial %d: granted to another client while the cut-off holder's lease (token %d) had not ended", i, la.Token())
			}
		}()
	}
	if !first {
		c.note("the cut-off holder's lease ended at least %v before the next grant", c.Margin)
	}
}

func (f *faults) quorumLoss(t *testing.T, c *Cell) {
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
			c.violation("trial %d: %d of %d nodes down (a majority up): not granted: %v", i, minority, n, err)
		}
		ns.StopNodes(t, majority)
		start := time.Now()
		_, err := l.Acquire(ctxFor(t, 30*time.Second), key(t, fmt.Sprintf("quorum-majority%d", i)), dlock.WithRetry(dlock.LimitRetry(dlock.LinearBackoff(10*time.Millisecond), 2)))
		took := time.Since(start)
		switch {
		case err == nil:
			c.violation("trial %d: %d of %d nodes down: granted without a quorum", i, majority, n)
		case !errors.Is(err, dlock.ErrUnavailable):
			c.violation("trial %d: %d of %d nodes down: want ErrUnavailable, got %v", i, majority, n, err)
		default:
			c.note("trial %d: ErrUnavailable after %v with %d of %d down", i, took.Round(time.Millisecond), majority, n)
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

func (f *faults) leaderKill(t *testing.T, c *Cell) {
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
			c.Status = Unavailable
			c.note("trial %d: the lock service did not resume within 45s of the leader's death", i)
			if d, isD := f.h.(Diagnoser); isD {
				c.note("trial %d: the store then: %s", i, d.Diagnose(t, k))
			}
		} else {
			c.Unavailable = max(c.Unavailable, resumed.Sub(killed))
		}
		for _, o := range res.Overlaps() {
			c.violation("trial %d: %s", i, o)
		}
		for _, s := range tokens.stale {
			c.violation("trial %d: fencing token did not increase across the leader change: %s", i, s)
		}
	}
	c.note("first grant after the leader kill came within %v", c.Unavailable.Round(time.Millisecond))
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

func (f *faults) clockJump(t *testing.T, c *Cell) {
	cj := f.h.(ClockJumper)
	f.heldThroughFault(t, c, func(int) { cj.JumpClock(t, 2*time.Minute) })
}
