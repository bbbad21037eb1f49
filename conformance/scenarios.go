package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// The fault scenarios, written once for every subject: the mutex (RunFaults) and
// the primitives beyond it (faults_primitives.go). A subject says how the
// scenarios take it (its family), what a holder child takes (its kind), and which
// properties the scenarios threaten.

// subject is what the fault scenarios run on.
type subject struct {
	f        *faults
	fam      family
	kind     string // the child holder's kind (childAcquire): "" for the mutex
	bound    spec.Property
	returns  spec.Property
	contend  func(t testing.TB, l dlock.Locker, k string, c, r int) (handle, bool) // for LeaderKill
	gaugeMax int                                                                   // the gauge's limit (0: read-write)
	trialsOf func(base spec.Scenario) int                                          // the trials of a scenario mirroring base
	// tokens: LeaderKill also checks that grants, which follow one another, carry
	// increasing tokens (the mutex of a fencing backend).
	tokens bool
}

// runs pairs each scenario of list (the mutex's, or a primitive's that mirror them)
// with its run, enabled by the harness's interfaces as the mutex's scenario is.
func (p *subject) runs(list []spec.Scenario) []run {
	h := p.f.h
	_, url := h.(URLer)
	_, restart := h.(ServerRestarter)
	_, fo := h.(Failoverer)
	_, part := h.(Partitioner)
	_, nodes := h.(NodeStopper)
	_, leader := h.(LeaderKiller)
	_, clock := h.(ClockJumper)
	_, nodeFaults := h.(NodeFaulter)
	enabled := map[spec.Scenario]bool{spec.HolderCrash: url, spec.WaiterCrash: url, spec.HolderPause: url, spec.HolderPauseFenced: url, spec.ServerRestart: restart,
		spec.Failover: fo, spec.FailoverFencing: fo, spec.Partition: part, spec.StoreHang: part, spec.QuorumLoss: nodes,
		spec.LeaderKill: leader, spec.LeaderKillLease: leader, spec.ClockJump: clock, spec.ClockJumpBareMajority: nodeFaults}
	fns := map[spec.Scenario]func(*testing.T, *results.Cell){
		spec.HolderCrash:       p.holderCrash,
		spec.HolderPause:       func(t *testing.T, c *results.Cell) { p.holderPause(t, c, false) },
		spec.HolderPauseFenced: func(t *testing.T, c *results.Cell) { p.holderPause(t, c, true) },
		spec.ServerRestart: func(t *testing.T, c *results.Cell) {
			p.heldThroughFault(t, c, func() { h.(ServerRestarter).RestartServers(t) })
		},
		spec.Failover:   p.failover,
		spec.Partition:  p.partition,
		spec.QuorumLoss: p.quorumLoss,
		spec.LeaderKill: p.leaderKill,
		spec.ClockJump: func(t *testing.T, c *results.Cell) {
			p.heldThroughFault(t, c, func() { h.(ClockJumper).JumpClock(t, 2*time.Minute) })
		},
		// The mutex's alone (faults_mutex.go): no primitive mirrors them.
		spec.WaiterCrash:           p.f.waiterCrash,
		spec.FailoverFencing:       p.f.failoverFencing,
		spec.StoreHang:             p.f.storeHang,
		spec.LeaderKillLease:       p.f.leaderKillLease,
		spec.ClockJumpBareMajority: p.f.clockJumpBareMajority,
	}
	var out []run
	for _, s := range list {
		base := spec.MutexScenarioOf(s)
		fn := fns[base]
		out = append(out, run{s, enabled[base], func(t *testing.T, c *results.Cell) {
			c.Expected = p.f.caps.Expect(base)
			c.Property = string(p.bound)
			p.f.trials = p.trialsOf(base)
			fn(t, c)
		}})
	}
	return out
}

// keyed is a mutex as a handle: key on l.
type keyed struct {
	l dlock.Locker
	k string
}

func (h keyed) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.l.Acquire(ctx, h.k, opts...)
}

func (h keyed) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.l.TryAcquire(ctx, h.k, opts...)
}

// mutexSubject is the mutex in the fault campaign: one lease fills it.
// mutexFamily is the mutex seen as a family: the handle is the key itself.
var mutexFamily = family{name: "lock",
	contender: func(t testing.TB, l dlock.Locker, k string) handle { return keyed{l, k} },
	fill: func(t testing.TB, l dlock.Locker, k string, opts ...dlock.Option) ([]dlock.Lease, error) {
		return tryAll(t, []handle{keyed{l, k}}, opts...)
	}}

func mutexSubject(f *faults) *subject {
	return &subject{f: f, trialsOf: func(s spec.Scenario) int { return trials(f.caps, s) }, fam: mutexFamily, bound: spec.MutualExclusion, returns: spec.DeadlockFreedom, gaugeMax: 1, tokens: f.caps.Fencing,
		contend: func(t testing.TB, l dlock.Locker, k string, _, _ int) (handle, bool) { return keyed{l, k}, true }}
}

// contender is the handle the scenarios ask with: the same kind as the child's
// (a limit-1 semaphore's permit, an exclusive lease, or a candidate).
func (p *subject) contender(t testing.TB, l dlock.Locker, k string) handle {
	switch p.kind {
	case "":
		return keyed{l, k}
	case "exclusive":
		return newRWMutex(t, l, k)
	case "election":
		return newCandidate(t, l, k)
	}
	return newSemaphore(t, l, k, 1)
}

// holderCrash: the child holding the primitive gets SIGKILL; its lease comes back
// after its TTL (or session), not before.
func (p *subject) holderCrash(t *testing.T, c *results.Cell) {
	f := p.f
	c.Property = string(p.returns)
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	var freed []time.Duration
	for i := range f.trials {
		k := key(t, fmt.Sprintf("prim-crash%d", i))
		h := p.contender(t, b, k)
		ch := startHolderOf(t, p.kind, url, k, ttl, "", "child")
		ch.signal(syscall.SIGKILL)
		killed := time.Now()
		c.Trials++
		if f.caps.PerLeaseTTL {
			if ls, err := h.TryAcquire(ctxFor(t, 10*time.Second)); err == nil {
				at := time.Since(ch.start)
				_ = ls.Release(ctxFor(t, 10*time.Second))
				if at < ttl-tolerance {
					c.Violation("trial %d: granted right after the holder's death, %v into its %v TTL", i, at, ttl)
					continue
				}
			}
		}
		ls, err := h.Acquire(ctxFor(t, f.freeBound(ttl)))
		if err != nil {
			c.Violation("trial %d: the dead holder's lease was not freed within %v: %v", i, f.freeBound(ttl), err)
			continue
		}
		if granted := time.Now(); f.caps.PerLeaseTTL && granted.Sub(ch.start) < ttl-tolerance {
			c.Violation("trial %d: granted %v after the dead holder began to acquire, before its %v TTL", i, granted.Sub(ch.start), ttl)
		}
		freed = append(freed, time.Since(killed))
		_ = ls.Release(ctxFor(t, 10*time.Second))
	}
	if len(freed) > 0 {
		c.Note("lease freed %v after SIGKILL (ttl %v, session timeout %v)", freed, ttl, f.caps.SessionTimeout)
	}
}

// holderPause: the child is SIGSTOPped past its TTL; another client is granted
// and enters the resource; the child resumes and writes (to a resource that
// checks fencing tokens, with fenced).
func (p *subject) holderPause(t *testing.T, c *results.Cell, fenced bool) {
	f := p.f
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
		k := key(t, fmt.Sprintf("prim-pause%d", i))
		ch := startHolderOf(t, p.kind, url, k, ttl, srv.Addr(), "paused-holder")
		ch.signal(syscall.SIGSTOP)
		ls, err := p.contender(t, b, k).Acquire(ctxFor(t, f.freeBound(ttl)))
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
		if ans == "WROTE OK" && len(res.Overlaps()) > 0 {
			c.Violation("trial %d: the resumed holder (token %d) wrote while the new holder (token %d) held the last lease", i, ch.token, ls.Token())
		} else {
			c.Note("trial %d: stale write of token %d refused (new token %d)", i, ch.token, ls.Token())
		}
	}
}

// primGrantWhileLive asks h for a lease (retrying while the backend is
// unavailable, up to within) and reports whether it was granted while any of held
// had not ended. It releases what it gets.
func primGrantWhileLive(t testing.TB, h handle, held []dlock.Lease, within time.Duration) (granted, whileLive bool, unavailable time.Duration, err error) {
	deadline := time.Now().Add(within)
	start := time.Now()
	for {
		ls, err := h.TryAcquire(ctxFor(t, 5*time.Second), dlock.WithTTL(30*time.Second))
		if err == nil {
			live := false
			for _, x := range held {
				live = live || !isDone(x)
			}
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

// heldThroughFault fills the primitive from one client, injects the fault, and
// checks that another client is not granted while the leases live.
func (p *subject) heldThroughFault(t *testing.T, c *results.Cell, fault func()) {
	f := p.f
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("prim-fault%d", i))
		held, err := p.fam.fill(t, a, k, dlock.WithTTL(30*time.Second))
		if err != nil {
			c.Note("trial %d: the first holder was not granted: %v", i, err)
			fault()
			continue
		}
		fault()
		p.judge(t, c, i, p.fam.contender(t, b, k), held)
		releaseAll(t, held)
	}
}

// judge records what primGrantWhileLive saw in trial i.
func (p *subject) judge(t testing.TB, c *results.Cell, i int, h handle, held []dlock.Lease) {
	granted, live, unavail, err := primGrantWhileLive(t, h, held, 30*time.Second)
	switch {
	case granted && live:
		c.Violation("trial %d: a second client was granted while the first holder's leases were live", i)
	case granted:
		c.Note("trial %d: the first holder's leases ended before the second grant", i)
	case err != nil:
		c.Unavailable = max(c.Unavailable, unavail)
		c.Note("trial %d: unavailable for %v: %v", i, unavail.Round(time.Millisecond), err)
	}
}

func (p *subject) failover(t *testing.T, c *results.Cell) {
	f := p.f
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("prim-failover%d", i))
		fo.PauseReplication(t)
		held, err := p.fam.fill(t, a, k, dlock.WithTTL(30*time.Second))
		fo.Failover(t)
		if err != nil {
			c.Note("trial %d: the first holder was not granted before the failover: %v", i, err)
			continue
		}
		p.judge(t, c, i, p.fam.contender(t, b, k), held)
		releaseAll(t, held)
	}
}

// partition: the holder's link is blackholed; another client is granted only once
// the cut-off holder's leases have ended.
func (p *subject) partition(t *testing.T, c *results.Cell) {
	f := p.f
	pt := f.h.(Partitioner)
	b := f.client(t)
	ttl := f.leaseTTL()
	first := true
	for i := range f.trials {
		c.Trials++
		kept := func() bool {
			a, link := pt.NewPartitionedLocker(t)
			defer a.Close()
			defer link.Restore()
			k := key(t, fmt.Sprintf("prim-partition%d", i))
			held, err := p.fam.fill(t, a, k, dlock.WithTTL(ttl), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire before the partition: %v", i, err)
			}
			var mu sync.Mutex
			var end time.Time // when the last of held ended
			var watching sync.WaitGroup
			stop := make(chan struct{})
			defer close(stop) // a lease that never ends must not keep these goroutines
			for _, h := range held {
				watching.Go(func() {
					select {
					case <-h.Done():
						mu.Lock()
						if now := time.Now(); now.After(end) {
							end = now
						}
						mu.Unlock()
					case <-stop:
					}
				})
			}
			link.Blackhole()
			ls, err := p.fam.contender(t, b, k).Acquire(ctxFor(t, f.freeBound(ttl)))
			grantedAt := time.Now()
			if err != nil {
				f.keptLock(t, c, i, "cut-off", ttl, err)
				return true
			}
			defer func() { _ = ls.Release(ctxFor(t, 10*time.Second)) }()
			for _, h := range held {
				if !isDone(h) {
					c.Violation("trial %d: granted to another client while a cut-off holder's lease (token %d) had not ended", i, h.Token())
					return false
				}
			}
			watching.Wait() // every lease has ended: each watcher has recorded when
			mu.Lock()
			margin := grantedAt.Sub(end)
			mu.Unlock()
			if first || margin < c.Margin {
				c.Margin, first = margin, false
			}
			return false
		}()
		if kept {
			break
		}
	}
	if !first {
		c.Note("the cut-off holder's leases ended at least %v before the next grant", c.Margin)
	}
}

func (p *subject) quorumLoss(t *testing.T, c *results.Cell) {
	f := p.f
	ns := f.h.(NodeStopper)
	c.Property = "Availability"
	l := f.client(t)
	n := ns.Nodes()
	minority, majority := (n-1)/2, n/2+1
	t.Cleanup(func() { ns.RestartNodes(t) })
	retried := 0
	for i := range f.trials {
		c.Trials++
		ns.StopNodes(t, minority)
		// A majority up must grant. Acquire does not retry ErrUnavailable (a caller
		// does), and the first request to a node restarted by the trial before may
		// pay a reconnection longer than a per-node timeout on a loaded machine: a
		// few attempts, counted in the notes. A backend that needs more than a
		// majority fails every attempt.
		var ls dlock.Lease
		var err error
		for attempt := range 3 {
			ls, err = p.fam.contender(t, l, key(t, fmt.Sprintf("prim-quorum-minority%d", i))).Acquire(ctxFor(t, 30*time.Second))
			if !errors.Is(err, dlock.ErrUnavailable) {
				break
			}
			if attempt < 2 {
				retried++
			}
		}
		if err != nil {
			c.Violation("trial %d: %d of %d nodes down (a majority up): not granted in 3 attempts: %v", i, minority, n, err)
		} else {
			_ = ls.Release(ctxFor(t, 10*time.Second))
		}
		ns.StopNodes(t, majority)
		_, err = p.fam.contender(t, l, key(t, fmt.Sprintf("prim-quorum-majority%d", i))).Acquire(ctxFor(t, 30*time.Second),
			dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(10*time.Millisecond), 2)))
		switch {
		case err == nil:
			c.Violation("trial %d: %d of %d nodes down: granted without a quorum", i, majority, n)
		case !errors.Is(err, dlock.ErrUnavailable):
			c.Violation("trial %d: %d of %d nodes down: want ErrUnavailable, got %v", i, majority, n, err)
		}
		ns.RestartNodes(t)
	}
	if retried > 0 {
		c.Note("with a majority up, %d acquire(s) of %d trials answered ErrUnavailable and were asked again", retried, f.trials)
	}
}

// leaderKill: clients contend for the primitive (the gauge watching the rule)
// while the cluster's leader is killed; the service must resume, with the rule kept.
func (p *subject) leaderKill(t *testing.T, c *results.Cell) {
	f := p.f
	lk := f.h.(LeaderKiller)
	const clients = 4
	// The mutex's other fact of a leader kill: does a lease held across it survive?
	var lease *results.Cell
	var holder dlock.Locker
	if p.kind == "" {
		lease = &results.Cell{Property: "LeaseKept"}
		f.leaseFact = lease
		holder = f.client(t)
	}
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("prim-leader%d", i))
		var held dlock.Lease
		if lease != nil {
			var err error
			held, err = holder.Acquire(ctxFor(t, 30*time.Second), key(t, fmt.Sprintf("leader-held%d", i)), dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire the lease held across the kill: %v", i, err)
			}
		}
		g := newGauge(p.gaugeMax)
		log := &grantLog{signal: make(chan struct{}, 1)}
		var tokens struct {
			sync.Mutex
			last  uint64
			stale []string
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		var wg sync.WaitGroup
		for j := range clients {
			l := f.client(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; ctx.Err() == nil; r++ {
					h, exclusive := p.contend(t, l, k, j, r)
					ls, err := h.Acquire(ctx, dlock.WithTTL(f.leaseTTL()))
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(50 * time.Millisecond) // the cluster is electing; ask again
						}
						continue
					}
					name := fmt.Sprintf("client%d/%d", j, r)
					if p.tokens { // grants follow one another: so must tokens
						tokens.Lock()
						if ls.Token() <= tokens.last {
							tokens.stale = append(tokens.stale, fmt.Sprintf("%s granted token %d after token %d", name, ls.Token(), tokens.last))
						}
						tokens.last = max(tokens.last, ls.Token())
						tokens.Unlock()
					}
					g.enter(name, exclusive)
					log.add(time.Now())
					time.Sleep(time.Millisecond) // the critical section's work
					g.leave(name)
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
					_ = ls.Release(rctx) // may fail mid-election: the lease then expires
					rcancel()
				}
			}()
		}
		if _, ok := log.waitFor(20, time.Time{}, 30*time.Second); !ok {
			cancel()
			wg.Wait()
			t.Fatalf("trial %d: fewer than 20 grants in 30s before the leader kill", i)
		}
		lk.KillLeader(t)
		killed := time.Now()
		resumed, ok := log.waitFor(20, killed, 45*time.Second)
		cancel()
		wg.Wait()
		if !ok {
			c.Status = spec.Unavailable
			c.Note("trial %d: the service did not resume within 45s of the leader's death", i)
			if d, isD := f.h.(Diagnoser); isD {
				c.Note("trial %d: the store then: %s", i, d.Diagnose(t, k))
			}
		} else {
			c.Unavailable = max(c.Unavailable, resumed.Sub(killed))
		}
		if lease != nil {
			// Give a client that lost its connection with the leader the time it
			// takes to conclude (a third of a session timeout, a renewal period).
			time.Sleep(time.Second)
			lease.Trials++
			if err := held.Err(); err != nil {
				lease.Violation("trial %d: the lease held across the leader kill ended: %v", i, err)
			} else {
				lease.Note("trial %d: the lease held across the leader kill was kept", i)
			}
			_ = held.Release(ctxFor(t, 10*time.Second))
		}
		overs, _ := g.report()
		for _, o := range overs {
			c.Violation("trial %d: %s", i, o)
		}
		for _, s := range tokens.stale {
			c.Violation("trial %d: fencing token did not increase across the leader change: %s", i, s)
		}
	}
	c.Note("first grant after the leader kill came within %v", c.Unavailable.Round(time.Millisecond))
}
