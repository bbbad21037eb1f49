package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// The properties of leader election (spec.ElectionProperties), for a backend that
// declares Capabilities.Election.

func init() {
	primitiveChecks = append(primitiveChecks, (*suite).electionChecks)
}

// promptly bounds how long after a resignation a waiting candidate must lead.
const promptly = time.Second

func (s *suite) electionChecks(t *testing.T) {
	p := s.caps.Election
	if p == nil {
		return
	}
	ps := s.forPrimitive(p)
	checks := map[spec.Property]func(*testing.T, *verdict){
		spec.ElectionSingleLeader: func(t *testing.T, v *verdict) { ps.singleLeader(t, v, p) },
		spec.ElectionObserve:      ps.electionObserve,
		spec.ElectionFailover:     ps.electionFailover,
		spec.ElectionResign:       ps.electionResign,
	}
	for _, prop := range spec.ElectionProperties {
		ps.property(t, prop, checks[prop])
	}
}

// forPrimitive returns a suite that checks p's properties: its declared
// weaknesses are p's.
func (s *suite) forPrimitive(p *spec.Primitive) *suite {
	ps := *s
	ps.caps.Weaknesses, ps.caps.HarnessOnly = p.Weaknesses, nil
	return &ps
}

// election returns the election name on l, failing t if the backend has none.
func election(t testing.TB, l dlock.Locker, name string) *recElection {
	t.Helper()
	e, err := dlock.NewElection(l, name)
	if err != nil {
		t.Fatalf("NewElection(%q): %v (the backend declares elections)", name, err)
	}
	re := &recElection{Election: e}
	if rl, ok := l.(*recLocker); ok {
		re.r, re.client = rl.r, rl.name
	}
	return re
}

// mustLead campaigns on e with value and fails t if it does not lead within 30s.
func mustLead(t testing.TB, e *recElection, value string, opts ...dlock.Option) dlock.Lease {
	t.Helper()
	ls, err := e.Campaign(ctxFor(t, 30*time.Second), value, opts...)
	if err != nil {
		t.Fatalf("Campaign(%q) in election %q: %v", value, e.Name(), err)
	}
	return ls
}

// expectNotElected makes one campaign attempt on an election another candidate
// leads and records a violation if it won.
func expectNotElected(t testing.TB, v *verdict, e *recElection, what string) {
	t.Helper()
	ls, err := e.TryCampaign(ctxFor(t, 10*time.Second), "intruder", dlock.WithTTL(30*time.Second))
	switch {
	case err == nil:
		v.violated("%s: TryCampaign won (token %d)", what, ls.Token())
		_ = ls.Release(ctxFor(t, 10*time.Second))
	case !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("%s: TryCampaign: want ErrNotAcquired, got %v", what, err)
	}
}

// singleLeader: candidates on several clients take turns leading; the protected
// resource sees one leader at a time, Leader reports the one that leads, and with
// fencing each term's token is above the previous term's.
func (s *suite) singleLeader(t *testing.T, v *verdict, p *spec.Primitive) {
	const clients, rounds = 6, 5
	name := key(t, "election")
	res := NewResource(false)
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	for c := range clients {
		e := election(t, s.client(t), name)
		wg.Go(func() {
			for r := range rounds {
				holder := fmt.Sprintf("candidate%d", c)
				value := fmt.Sprintf("%s/term%d", holder, r)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ls, err := e.Campaign(ctx, value, dlock.WithTTL(30*time.Second))
				cancel()
				if err != nil {
					t.Errorf("%s: Campaign: %v", holder, err)
					return
				}
				res.Enter(holder, ls.Token())
				mu.Lock()
				tokens = append(tokens, ls.Token())
				mu.Unlock()
				if l, err := e.Leader(ctxFor(t, 10*time.Second)); err != nil {
					v.violated("%s leads (token %d), but Leader says: %v", holder, ls.Token(), err)
				} else if l.Value != value || l.Token != ls.Token() {
					v.violated("%s leads with %q (token %d), but Leader says %q (token %d)", holder, value, ls.Token(), l.Value, l.Token)
				}
				time.Sleep(200 * time.Microsecond) // the leader's work
				res.Leave(holder)
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Errorf("%s: resign: %v", holder, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, o := range res.Overlaps() {
		v.violated("two leaders at once: %s", o)
	}
	if p.Fencing {
		for i, tok := range tokens {
			if tok == 0 || i > 0 && tok <= tokens[i-1] {
				v.violated("term %d has token %d after a term with token %d", i, tok, tokens[max(i-1, 0)])
			}
		}
	}
	t.Logf("%d terms, %d overlaps", len(tokens), len(res.Overlaps()))
}

// term is one term as a candidate saw it.
type term struct {
	value string
	token uint64
}

// electionObserve: observers started while a leader leads report it first; then,
// with each leader leading until every observer has reported it, each observer
// reports exactly the sequence of leaders. Under fast churn every report is a real
// term, tokens strictly increase, and the last term is reported.
func (s *suite) electionObserve(t *testing.T, v *verdict) {
	const observers, turns = 3, 4
	name := key(t, "observe")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := mustLead(t, election(t, s.client(t), name), "first", dlock.WithTTL(30*time.Second))
	chans := make([]<-chan dlock.Leader, observers)
	for i := range chans {
		chans[i] = election(t, s.client(t), name).Observe(ctx)
	}
	next := func(i int, deadline time.Time) (dlock.Leader, bool) {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case l, ok := <-chans[i]:
			return l, ok
		case <-t.C:
			return dlock.Leader{}, false
		}
	}
	// expect has every observer report want next, within 10s.
	expect := func(want term) bool {
		ok := true
		deadline := time.Now().Add(10 * time.Second)
		for i := range chans {
			got, open := next(i, deadline)
			switch {
			case !open:
				v.violated("observer %d did not report the leader %q (token %d) within 10s", i, want.value, want.token)
				ok = false
			case got.Value != want.value || got.Token != want.token:
				v.violated("observer %d reported %q (token %d), want the new leader %q (token %d)", i, got.Value, got.Token, want.value, want.token)
				ok = false
			}
		}
		return ok
	}
	if !expect(term{"first", first.Token()}) {
		_ = first.Release(ctxFor(t, 10*time.Second))
		return
	}
	release(t, first)
	for i := range turns {
		ls := mustLead(t, election(t, s.client(t), name), fmt.Sprintf("turn%d", i), dlock.WithTTL(30*time.Second))
		ok := expect(term{fmt.Sprintf("turn%d", i), ls.Token()})
		if !ok {
			_ = ls.Release(ctxFor(t, 10*time.Second))
			return
		}
		release(t, ls)
	}

	// Fast churn: candidates resign as soon as they lead.
	const candidates, rounds = 3, 5
	var mu sync.Mutex
	granted := map[uint64]string{}
	var wg sync.WaitGroup
	for c := range candidates {
		e := election(t, s.client(t), name)
		wg.Go(func() {
			for r := range rounds {
				value := fmt.Sprintf("churn%d/%d", c, r)
				ls, err := e.Campaign(ctxFor(t, time.Minute), value, dlock.WithTTL(30*time.Second))
				if err != nil {
					t.Errorf("churn candidate %d: %v", c, err)
					return
				}
				mu.Lock()
				granted[ls.Token()] = value
				mu.Unlock()
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Errorf("churn candidate %d: resign: %v", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
	// A last leader that stays until every observer has reported it: a store that
	// keeps no history of terms may miss short ones, never a leader that stays.
	final := mustLead(t, election(t, s.client(t), name), "final", dlock.WithTTL(30*time.Second))
	defer release(t, final)
	granted[final.Token()] = "final"
	missed := 0
	deadline := time.Now().Add(10 * time.Second)
	for i := range chans {
		var prev uint64
		seen := 0
		for prev < final.Token() {
			got, open := next(i, deadline)
			if !open {
				v.violated("observer %d did not report the leader that followed the churn (token %d) within 10s; its last report was token %d", i, final.Token(), prev)
				break
			}
			if got.Token <= prev {
				v.violated("observer %d reported token %d after token %d", i, got.Token, prev)
			}
			if want, ok := granted[got.Token]; !ok || want != got.Value {
				v.violated("observer %d reported %q (token %d), which no candidate was granted", i, got.Value, got.Token)
			}
			prev = got.Token
			seen++
		}
		missed += len(granted) - seen
	}
	t.Logf("churn: %d terms; the %d observers missed %d of them in all", len(granted)-1, observers, missed)
}

// electionFailover: a leader that vanishes is replaced within its TTL (or session
// timeout), not before, and not while its own lease is live.
func (s *suite) electionFailover(t *testing.T, v *verdict) {
	name := key(t, "failover")
	a, b := s.client(t), s.client(t)
	vanisher, canVanish := s.h.(Vanisher)
	ttl, bound := 3*s.unit, 3*3*s.unit+2*time.Second
	if !s.caps.PerLeaseTTL {
		if !canVanish {
			t.Skip("session-based backend and the harness has no Vanisher: cannot make a leader vanish")
		}
		ttl, bound = s.caps.SessionTimeout, s.caps.SessionTimeout+10*time.Second
	}
	t0 := time.Now()
	la := mustLead(t, election(t, a, name), "vanishing", dlock.WithTTL(ttl))
	vanished := time.Now()
	if canVanish {
		s.cr.rec.fault("client vanished (cut off, as a crashed host)", func() { vanisher.Vanish(t, harnessClient(a)) })
	} // else: the term is abandoned, neither renewed nor resigned
	eb := election(t, b, name)
	if s.caps.PerLeaseTTL {
		sleepUntil(t0.Add(ttl / 2))
		if time.Since(t0) < ttl-tolerance {
			expectNotElected(t, v, eb, fmt.Sprintf("half-way through the vanished leader's %v TTL", ttl))
		}
	} else {
		expectNotElected(t, v, eb, "right after the leader vanished, before its session timed out")
	}
	lb, err := eb.Campaign(ctxFor(t, bound), "successor", dlock.WithTTL(ttl))
	if err != nil {
		v.violated("the vanished leader was not replaced within %v (ttl or session %v): %v", bound, ttl, err)
		return
	}
	took := time.Since(vanished)
	if s.caps.PerLeaseTTL && time.Since(t0) < ttl-tolerance {
		v.violated("a successor was elected %v after the leader's campaign, before its %v TTL", time.Since(t0), ttl)
	}
	if !isDone(la) {
		v.violated("a successor was elected while the vanished leader's term had not ended (Done open)")
	}
	t.Logf("replaced %v after the leader vanished (ttl or session %v)", took.Round(time.Millisecond), ttl)
	release(t, lb)
}

// electionResign: a candidate waiting while the leader resigns leads promptly;
// Leader reports it, and no leader once it resigned too.
func (s *suite) electionResign(t *testing.T, v *verdict) {
	name := key(t, "resign")
	ea, eb := election(t, s.client(t), name), election(t, s.client(t), name)
	la := mustLead(t, ea, "first", dlock.WithTTL(30*time.Second))
	type result struct {
		ls dlock.Lease
		at time.Time
	}
	got := make(chan result, 1)
	errc := make(chan error, 1)
	go func() {
		ls, err := eb.Campaign(ctxFor(t, time.Minute), "second", dlock.WithTTL(30*time.Second))
		if err != nil {
			errc <- err
			return
		}
		got <- result{ls, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond) // let the candidate start waiting; resigning earlier must work too
	resigned := time.Now()
	release(t, la)
	var r result
	select {
	case r = <-got:
	case err := <-errc:
		t.Fatalf("waiting candidate: %v", err)
	}
	took := r.at.Sub(resigned)
	if took > promptly {
		v.violated("the waiting candidate led %v after the leader resigned (want within %v)", took, promptly)
	}
	t.Logf("a waiting candidate led %v after the leader resigned", took.Round(time.Microsecond))
	if l, err := ea.Leader(ctxFor(t, 10*time.Second)); err != nil || l.Value != "second" || l.Token != r.ls.Token() {
		v.violated("after the resignation Leader says %q (token %d, err %v), want %q (token %d)", l.Value, l.Token, err, "second", r.ls.Token())
	}
	release(t, r.ls)
	if l, err := ea.Leader(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNoLeader) {
		v.violated("after every leader resigned Leader says %q (token %d, err %v), want ErrNoLeader", l.Value, l.Token, err)
	}
}
