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
		spec.Failover: fo, spec.FailoverFencing: fo, spec.FailoverFencedWrite: fo, spec.Partition: part, spec.StoreHang: part, spec.QuorumLoss: nodes,
		spec.LeaderKill: leader, spec.LeaderKillLease: leader, spec.ClockJump: clock, spec.ClockJumpBareMajority: nodeFaults}
	fns := map[spec.Scenario]func(*testing.T, *cellRun){
		spec.HolderCrash:       p.holderCrash,
		spec.HolderPause:       func(t *testing.T, r *cellRun) { p.holderPause(t, r, false) },
		spec.HolderPauseFenced: func(t *testing.T, r *cellRun) { p.holderPause(t, r, true) },
		spec.ServerRestart: func(t *testing.T, r *cellRun) {
			p.heldThroughFault(t, r, "server restart", func() { h.(ServerRestarter).RestartServers(t) })
		},
		spec.Failover:   p.failover,
		spec.Partition:  p.partition,
		spec.QuorumLoss: p.quorumLoss,
		spec.LeaderKill: p.leaderKill,
		spec.ClockJump: func(t *testing.T, r *cellRun) {
			p.heldThroughFault(t, r, "clock jump", func() { h.(ClockJumper).JumpClock(t, 2*time.Minute) })
		},
		// The mutex's alone (faults_mutex.go): no primitive mirrors them.
		spec.WaiterCrash:           p.f.waiterCrash,
		spec.FailoverFencing:       p.f.failoverFencing,
		spec.FailoverFencedWrite:   p.f.failoverFencedWrite,
		spec.StoreHang:             p.f.storeHang,
		spec.LeaderKillLease:       p.f.leaderKillLease,
		spec.ClockJumpBareMajority: p.f.clockJumpBareMajority,
	}
	var out []run
	for _, s := range list {
		base := spec.MutexScenarioOf(s)
		fn := fns[base]
		out = append(out, run{s, enabled[base], p.trialsOf(base), func(t *testing.T, r *cellRun) {
			r.c.Expected = p.f.caps.Expect(base)
			r.c.Property = string(p.bound)
			fn(t, r)
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
		return rwHandle(t, l, k, true)
	case "election":
		return newCandidate(t, l, k)
	}
	return semHandle(t, l, k, 1)
}

// exclusion is what most scenarios claim: no two clients believed they held
// the primitive beyond what it allows at any moment of the trial.
func (p *subject) exclusion() claims { return claims{exclusion: true} }

// heldAtFault is the condition of a scenario whose fault must strike while the
// first holder's leases live: some lease of key was held when the fault whose
// name starts with what began.
func heldAtFault(key, what string) func(v *view) (bool, string) {
	return func(v *view) (bool, string) {
		f, ok := v.faultNamed(what)
		if !ok {
			return false, "the fault (" + what + ") was not injected"
		}
		if !v.heldAt(key, "", f.start) {
			return false, fmt.Sprintf("no lease of the key was held when the fault (%s) began at %s", what, v.at(f.start))
		}
		return true, ""
	}
}

// holderCrash: the child holding the primitive gets SIGKILL; its lease comes back
// after its TTL (or session), not before: the checker counts the dead holder as
// holding until its validity would have ended (a dead process is, to the others, a
// paused one), and demands a grant within the bound after the kill.
func (p *subject) holderCrash(t *testing.T, r *cellRun) {
	f := p.f
	r.c.Property = string(p.returns)
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	var freed []time.Duration
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("prim-crash%d", i))
		h := p.contender(t, b, k)
		ch := startHolderOf(t, r.rec, p.kind, url, k, ttl, "", "child")
		ch.signal(syscall.SIGKILL)
		killed := mono()
		cl := claims{exclusion: true, exercised: heldAtFault(k, "SIGKILL child"),
			liveness: []liveness{{key: k, not: "child", after: killed, within: f.freeBound(ttl), what: "the dead holder's lease was not freed"}}}
		if f.caps.PerLeaseTTL {
			cl.heldUntil = map[string]int64{"child": ch.call + int64(ttl-tolerance)}
			if ls, err := h.TryAcquire(ctxFor(t, 10*time.Second)); err == nil {
				_ = ls.Release(ctxFor(t, 10*time.Second))
			}
		}
		if ls, err := h.Acquire(ctxFor(t, f.freeBound(ttl))); err == nil {
			freed = append(freed, time.Duration(mono()-killed))
			_ = ls.Release(ctxFor(t, 10*time.Second))
		}
		r.judge(cl)
	}
	if len(freed) > 0 {
		r.c.Note("lease freed %v after SIGKILL (ttl %v, session timeout %v)", roundAll(freed), ttl, f.caps.SessionTimeout)
	}
}

// cutOff is the cause a lease of client, cut off from its store, must end with if
// it is lost: its renewals went unanswered until its deadline, or its client gave
// up a session it could no longer confirm (dlock.CauseUnreachable) — or, for a
// session lease, a client library said its session ended (CauseSession: a peer's
// library may call it so; dlock's own backends say unreachable).
func (f *faults) cutOff(client, what string) causes {
	want := []dlock.Cause{dlock.CauseUnreachable}
	if !f.caps.PerLeaseTTL {
		want = append(want, dlock.CauseSession)
	}
	return causes{client: client, want: causeNames(want...), what: what}
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// holderPause: the child is SIGSTOPped past its TTL; another client is granted
// and enters the resource; the child resumes and writes (to a resource that
// checks fencing tokens, with fenced). The claim is the resource's: its critical
// sections never overlapped (and, fenced, it followed the fencing rule). The trial
// counts when the resumed holder's write reached the resource while the new
// holder was inside. Fenced, the mutex's writes also go to the harness's fencing
// guards (FenceGuarder), each judged in a cell of its own from the same trials.
func (p *subject) holderPause(t *testing.T, r *cellRun, fenced bool) {
	f := p.f
	url := f.h.(URLer).URL(t)
	b := f.client(t)
	ttl := f.leaseTTL()
	var guards []guardRun
	if fenced && p.kind == "" {
		guards = f.guardRuns(t, r, spec.HolderPauseFenced, string(spec.MutualExclusion))
		defer f.addGuardCells(t, guards)
	}
	judge := func(exercised func(res string) func(*view) (bool, string)) {
		r.judge(claims{resource: true, recipe: fenced, exercised: exercised("")})
		judgeGuards(r, guards, func(g string) claims {
			return claims{resource: true, recipe: true, guard: g, exercised: exercised(g)}
		})
	}
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("prim-pause%d", i))
		res := newRecordedResource(fenced, r.rec)
		if len(guards) > 0 {
			res = newGuardedResource(r.rec, k, guards)
		}
		srv, err := newResourceServer(res)
		if err != nil {
			t.Fatal(err)
		}
		ch := startHolderOf(t, r.rec, p.kind, url, k, ttl, srv.Addr(), "paused-holder")
		ch.signal(syscall.SIGSTOP)
		ls, err := p.contender(t, b, k).Acquire(ctxFor(t, f.freeBound(ttl)))
		if err != nil {
			ch.kill()
			srv.Close()
			judge(func(string) func(*view) (bool, string) {
				return func(*view) (bool, string) {
					return false, fmt.Sprintf("the store kept the paused holder's lock for %v: no second client was granted (%v)", f.freeBound(ttl), err)
				}
			})
			if !f.caps.PerLeaseTTL {
				break // a session store keeps it in every trial: waiting again shows nothing new
			}
			continue
		}
		res.Enter("new-holder", ls.Token())
		ch.signal(syscall.SIGCONT)
		ch.send("WRITE")
		ch.expect("WROTE", time.Minute)
		res.Leave("new-holder")
		_ = ls.Release(ctxFor(t, 10*time.Second))
		ch.kill()
		srv.Close()
		judge(lateWriteReached)
	}
}

// lateWriteReached is the condition of a HolderPause trial, on the resource named
// res ("" the suite's own, or a guard's): the resumed holder's write reached it
// while the new holder was inside.
func lateWriteReached(res string) func(v *view) (bool, string) {
	return guardDecided(res, func(v *view) (bool, string) {
		inside := false
		for _, e := range v.events {
			if e.Resource != res || e.Phase == Call {
				continue
			}
			switch {
			case e.Op == OpEnter && e.Client == "new-holder" && e.Phase == OK:
				inside = true
			case e.Op == OpLeave && e.Client == "new-holder":
				inside = false
			case e.Op == OpEnter && e.Client == "paused-holder":
				if inside {
					return true, ""
				}
				return false, "the resumed holder's write did not reach the resource while the new holder was inside"
			}
		}
		return false, "the resumed holder's write never reached the resource"
	})
}

// grantWhileLive asks h for a lease, retrying while the backend is unavailable (up
// to within), and releases what it gets: the history records whether it was granted
// while the first holder's leases lived. It returns how long the backend was
// unavailable and its last error, if it never answered.
func grantWhileLive(t testing.TB, h handle, within time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(within)
	start := time.Now()
	for {
		ls, err := h.TryAcquire(ctxFor(t, 5*time.Second), dlock.WithTTL(30*time.Second))
		if err == nil {
			_ = ls.Release(ctxFor(t, 10*time.Second))
			return 0, nil
		}
		if errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
			return 0, nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), err
		}
		time.Sleep(100 * time.Millisecond) // the servers are coming back; poll them
	}
}

// heldThroughFault fills the primitive from one client, injects the fault (named
// what), and lets another client ask: the checker decides whether it was granted
// while the first holder's leases lived, and that a lease the fault ended names a
// cause the backend's kind allows (storeFaultCauses).
func (p *subject) heldThroughFault(t *testing.T, r *cellRun, what string, fault func()) {
	f := p.f
	a, b := f.client(t), f.client(t)
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("prim-fault%d", i))
		held, err := p.fam.fill(t, a, k, dlock.WithTTL(30*time.Second))
		if err != nil {
			r.c.Note("trial %d: the first holder was not granted: %v", i, err)
		}
		r.rec.fault(what, fault)
		if err == nil {
			p.ask(t, r, i, p.fam.contender(t, b, k))
			releaseAll(t, held)
		}
		cl := p.exclusion()
		cl.exercised = heldAtFault(k, what)
		cl.causes = []causes{{client: "", want: f.storeFaultCauses(), what: "a lease lost to a fault of the store (" + what + ")"}}
		r.judge(cl)
	}
}

// storeFaultCauses are the causes a lease may be lost with when its store restarts
// or its clock jumps, as dlock.Cause documents them for the backend's kind: a
// session lease ends with its session (ended, its node deleted with it, or given up
// while the client could not reach it); a lease with a TTL when a refresh or
// release finds the lock gone, at its deadline, or when a watch sees its key go.
// Neither kind may report a loss without a cause, nor a session backend a refusal
// or an expiry, nor a TTL backend a session's end.
func (f *faults) storeFaultCauses() []string {
	if !f.caps.PerLeaseTTL {
		return causeNames(dlock.CauseSession, dlock.CauseDeleted, dlock.CauseUnreachable)
	}
	return causeNames(dlock.CauseRefused, dlock.CauseExpired, dlock.CauseUnreachable, dlock.CauseDeleted)
}

// ask lets contender h ask for the key after a fault, noting how long the backend
// was unavailable.
func (p *subject) ask(t testing.TB, r *cellRun, i int, h handle) {
	if unavail, err := grantWhileLive(t, h, 30*time.Second); err != nil {
		r.c.Unavailable = max(r.c.Unavailable, unavail)
		r.c.Note("trial %d: unavailable for %v: %v", i, unavail.Round(time.Millisecond), err)
	}
}

func (p *subject) failover(t *testing.T, r *cellRun) {
	f := p.f
	fo := f.h.(Failoverer)
	a, b := f.client(t), f.client(t)
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("prim-failover%d", i))
		r.rec.fault("replication paused", func() { fo.PauseReplication(t) })
		held, err := p.fam.fill(t, a, k, dlock.WithTTL(30*time.Second))
		r.rec.fault("failover", func() { fo.Failover(t) })
		if err != nil {
			r.c.Note("trial %d: the first holder was not granted before the failover: %v", i, err)
		} else {
			p.ask(t, r, i, p.fam.contender(t, b, k))
			releaseAll(t, held)
		}
		cl := p.exclusion()
		cl.exercised = heldAtFault(k, "failover")
		r.judge(cl)
	}
}

// partition: the holder's link is blackholed; another client is granted only once
// the cut-off holder's leases have ended — each lost as unreachable.
func (p *subject) partition(t *testing.T, r *cellRun) {
	f := p.f
	pt := f.h.(Partitioner)
	b := f.client(t)
	ttl := f.leaseTTL()
	first := true
	for i := range r.trials() {
		kept := func() bool {
			a, link := pt.NewPartitionedLocker(t)
			a = r.rec.locker(a, "cut-off")
			defer a.Close()
			defer link.Restore()
			k := key(t, fmt.Sprintf("prim-partition%d", i))
			if _, err := p.fam.fill(t, a, k, dlock.WithTTL(ttl), dlock.WithAutoRenew()); err != nil {
				t.Fatalf("trial %d: acquire before the partition: %v", i, err)
			}
			r.rec.fault("partition of the holder", link.Blackhole)
			ls, err := p.fam.contender(t, b, k).Acquire(ctxFor(t, f.freeBound(ttl)))
			cl := p.exclusion()
			cl.exercised = heldAtFault(k, "partition")
			cl.causes = []causes{f.cutOff("cut-off", "a lease cut off from its store")}
			if err != nil {
				cl.exercised = func(*view) (bool, string) {
					return false, fmt.Sprintf("the store kept the cut-off holder's lock for %v: no second client was granted (%v)", f.freeBound(ttl), err)
				}
				r.judge(cl)
				return !f.caps.PerLeaseTTL // a session store keeps it in every trial
			}
			granted := mono()
			_ = ls.Release(ctxFor(t, 10*time.Second))
			o := r.judge(cl) // a cut-off lease still open now was live at the grant
			if !o.violated() && o.exercised {
				if m, ok := r.margin(k, "cut-off", granted); ok && (first || m < r.c.Margin) {
					r.c.Margin, first = m, false
				}
			}
			return false
		}()
		if kept {
			break
		}
	}
	if !first {
		r.c.Note("the cut-off holder's leases ended at least %v before the next grant", r.c.Margin)
	}
}

// quorumGrace is how long a client with a majority of nodes up may answer
// ErrUnavailable before QuorumLoss counts it as unavailable: several of go-redis's
// one-second reconnection probes.
const quorumGrace = 5 * time.Second

func (p *subject) quorumLoss(t *testing.T, r *cellRun) {
	f := p.f
	ns := f.h.(NodeStopper)
	r.c.Property = "Availability"
	l := f.client(t)
	n := ns.Nodes()
	minority, majority := (n-1)/2, n/2+1
	t.Cleanup(func() { ns.RestartNodes(t) })
	retried := 0
	for i := range r.trials() {
		r.rec.fault(fmt.Sprintf("%d of %d nodes stopped", minority, n), func() { ns.StopNodes(t, minority) })
		// A majority up must grant. Acquire does not retry ErrUnavailable (a caller
		// does), and a client may find a node restarted by the trial before still
		// unreachable for a while: go-redis's pool, after failing to dial a node,
		// fails every request to it at once until its probe (once a second)
		// reconnects — however fast the node came back. So the claim is a grant
		// within quorumGrace, asked again every 50ms, the attempts counted in the
		// notes; it does not hinge on how fast this machine restarts a node. A
		// backend that needs more than a majority fails every attempt.
		var ls dlock.Lease
		var err error
		asked := time.Now()
		for attempt := 0; ; attempt++ {
			ls, err = p.fam.contender(t, l, key(t, fmt.Sprintf("prim-quorum-minority%d", i))).Acquire(ctxFor(t, 30*time.Second))
			if !errors.Is(err, dlock.ErrUnavailable) || time.Since(asked) > quorumGrace {
				break
			}
			retried++
			time.Sleep(50 * time.Millisecond) // a caller's backoff, not a synchronization
		}
		r.rec.expect(err == nil, "%d of %d nodes down (a majority up): not granted within %v: %v", minority, n, quorumGrace, err)
		if err == nil {
			_ = ls.Release(ctxFor(t, 10*time.Second))
		}
		r.rec.fault(fmt.Sprintf("%d of %d nodes stopped", majority, n), func() { ns.StopNodes(t, majority) })
		_, err = p.fam.contender(t, l, key(t, fmt.Sprintf("prim-quorum-majority%d", i))).Acquire(ctxFor(t, 30*time.Second),
			dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(10*time.Millisecond), 2)))
		switch {
		case err == nil:
			r.rec.expect(false, "%d of %d nodes down: granted without a quorum", majority, n)
		case !errors.Is(err, dlock.ErrUnavailable):
			r.rec.expect(false, "%d of %d nodes down: want ErrUnavailable, got %v", majority, n, err)
		}
		ns.RestartNodes(t)
		r.judge(p.exclusion())
	}
	if retried > 0 {
		r.c.Note("with a majority up, %d acquire(s) of %d trials answered ErrUnavailable and were asked again", retried, r.c.Trials)
	}
}

// leaderKill: clients contend for the primitive (the gauge watching the rule)
// while the cluster's leader is killed; the service must resume, with the rule kept.
// The trial counts when grants came both before the kill and after it.
func (p *subject) leaderKill(t *testing.T, r *cellRun) {
	f := p.f
	lk := f.h.(LeaderKiller)
	const clients = 4
	// The mutex's other fact of a leader kill: does a lease held across it survive?
	var lease *cellRun
	var holder dlock.Locker
	if p.kind == "" {
		lc := results.Cell{Backend: r.c.Backend, Scenario: string(spec.LeaderKillLease), Property: "LeaseKept"}
		lease = newCellRun(t, &lc, r.want)
		lease.rec = r.rec // one trial, two facts: the same history
		f.leaseFact = lease
		holder = f.client(t)
	}
	cls := make([]dlock.Locker, clients)
	for j := range cls {
		cls[j] = f.client(t)
	}
	for i := range r.trials() {
		k := key(t, fmt.Sprintf("prim-leader%d", i))
		var held dlock.Lease
		heldKey := key(t, fmt.Sprintf("leader-held%d", i))
		if lease != nil {
			var err error
			held, err = holder.Acquire(ctxFor(t, 30*time.Second), heldKey, dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
			if err != nil {
				t.Fatalf("trial %d: acquire the lease held across the kill: %v", i, err)
			}
		}
		g := newRecordedGauge(p.gaugeMax, r.rec)
		log := &grantLog{signal: make(chan struct{}, 1)}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		var wg sync.WaitGroup
		for j, l := range cls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					h, exclusive := p.contend(t, l, k, j, n)
					ls, err := h.Acquire(ctx, dlock.WithTTL(f.leaseTTL()))
					if err != nil {
						if ctx.Err() == nil {
							time.Sleep(50 * time.Millisecond) // the cluster is electing; ask again
						}
						continue
					}
					name := fmt.Sprintf("client%d/%d", j, n)
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
		var killed int64
		var killedAt time.Time
		r.rec.fault("leader killed", func() { lk.KillLeader(t); killed, killedAt = mono(), time.Now() })
		resumed, ok := log.waitFor(20, time.Now(), 45*time.Second)
		cancel()
		wg.Wait()
		if !ok {
			r.c.Status = spec.Unavailable
			r.c.Note("trial %d: the service did not resume within 45s of the leader's death", i)
			if d, isD := f.h.(Diagnoser); isD {
				r.c.Note("trial %d: the store then: %s", i, d.Diagnose(t, k))
			}
		} else {
			r.c.Unavailable = max(r.c.Unavailable, resumed.Sub(killedAt))
		}
		if lease != nil {
			// Give a client that lost its connection with the leader the time it
			// takes to conclude (a third of a session timeout, a renewal period).
			time.Sleep(time.Second)
			_ = held.Release(ctxFor(t, 10*time.Second))
			lease.i, lease.cur = i, r.cur
			lease.judge(claims{exercised: heldAtFault(heldKey, "leader killed"), kept: []string{heldKey}})
		}
		cl := claims{exclusion: true, resource: true, fencing: p.tokens,
			liveness: []liveness{{key: k, after: killed, within: 45 * time.Second, what: "the service did not resume after the leader's death"}},
			exercised: func(v *view) (bool, string) {
				before := false
				for _, h := range v.grants(k) {
					before = before || h.start < killed
				}
				if !before {
					return false, "no grant before the leader kill"
				}
				return true, ""
			}}
		r.judge(cl)
	}
	r.c.Note("first grant after the leader kill came within %v", r.c.Unavailable.Round(time.Millisecond))
}
