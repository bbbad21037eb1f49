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

// The checks the primitives beyond the mutex share (cancellation, Close, Done/Err,
// fencing, a vanished holder's lease coming back), written once over a family: how
// the suite takes and fills one primitive. semaphore.go and rwlock.go define the
// families and their own properties.

func init() { primitiveChecks = append(primitiveChecks, (*suite).semaphores, (*suite).rwLocks) }

// handle is one kind of acquisition on one key from one client: a semaphore's
// permit, a read-write lock's shared or exclusive lease.
type handle interface {
	Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error)
	TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error)
}

// family is one primitive as the shared checks drive it.
type family struct {
	name string // in messages: "semaphore", "read-write lock"
	// contender returns the handle of a client that asks for key.
	contender func(t testing.TB, l dlock.Locker, key string) handle
	// fill takes, from l, the leases that keep every contender out of key. An error
	// means the store refused them (a violation where the key should be free).
	fill func(t testing.TB, l dlock.Locker, key string, opts ...dlock.Option) ([]dlock.Lease, error)
}

// weak reports whether p is a declared weakness, of the mutex or of a primitive.
func (s *suite) weak(p spec.Property) bool {
	for _, d := range []*spec.Primitive{s.caps.Semaphore, s.caps.RWLock, s.caps.Election, s.caps.MultiKey} {
		if d.Weak(p) {
			return true
		}
	}
	return s.caps.Weak(p)
}

// releaseAll releases leases, best effort (some may have ended on purpose).
func releaseAll(t testing.TB, leases []dlock.Lease) {
	for _, ls := range leases {
		_ = ls.Release(ctxFor(t, 10*time.Second))
	}
}

// tryAll takes n leases through hs (one handle each), stopping at the first refusal.
func tryAll(t testing.TB, hs []handle, opts ...dlock.Option) ([]dlock.Lease, error) {
	var out []dlock.Lease
	for i, h := range hs {
		ls, err := h.TryAcquire(ctxFor(t, 10*time.Second), opts...)
		if err != nil {
			releaseAll(t, out)
			return nil, fmt.Errorf("lease %d of %d: %w", i+1, len(hs), err)
		}
		out = append(out, ls)
	}
	return out, nil
}

// primCancellation: a contender's wait ends promptly when its ctx does, with
// ErrNotAcquired joined with the ctx's error, and leaves nothing behind: once the
// holders release, a third client fills the key.
func (s *suite) primCancellation(f family) func(*testing.T, *verdict) {
	return func(t *testing.T, v *verdict) {
		a, b, c := s.client(t), s.client(t), s.client(t)
		k := key(t, "prim-cancel")
		held, err := f.fill(t, a, k, dlock.WithTTL(60*time.Second))
		if err != nil {
			t.Fatalf("filling a free %s: %v", f.name, err)
		}
		const timeout = 300 * time.Millisecond
		const prompt = time.Second
		h := f.contender(t, b, k)
		t0 := time.Now()
		_, err = h.Acquire(ctxFor(t, timeout), dlock.WithTTL(60*time.Second))
		if took := time.Since(t0); took > timeout+prompt {
			v.violated("Acquire on a full %s returned %v after a %v ctx deadline", f.name, took-timeout, timeout)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNotAcquired) {
			v.violated("Acquire on a full %s with an expiring ctx: want ErrNotAcquired joined with context.DeadlineExceeded, got %v", f.name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			err error
			at  time.Time
		}
		out := make(chan result, 1)
		go func() {
			_, err := h.Acquire(ctx, dlock.WithTTL(60*time.Second))
			out <- result{err, time.Now()}
		}()
		time.Sleep(timeout) // let the waiter start waiting; cancelling earlier must work too
		cancelled := time.Now()
		cancel()
		r := <-out
		if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, dlock.ErrNotAcquired) {
			v.violated("Acquire on a full %s with a cancelled ctx: want ErrNotAcquired joined with context.Canceled, got %v", f.name, r.err)
		}
		if late := r.at.Sub(cancelled); late > prompt {
			v.violated("Acquire returned %v after its ctx was cancelled", late)
		}
		releaseAll(t, held)
		again, err := f.fill(t, c, k)
		if err != nil {
			v.violated("after two cancelled waits and the holders' Release, the %s could not be filled again: %v", f.name, err)
			return
		}
		releaseAll(t, again)
	}
}

// primClose: Close ends the client's leases with ErrClosed and frees them long
// before their TTL; the client's handles then fail with ErrClosed.
func (s *suite) primClose(f family) func(*testing.T, *verdict) {
	return func(t *testing.T, v *verdict) {
		a, b := s.unmanaged(t, "closing"), s.client(t)
		k := key(t, "prim-close")
		h := f.contender(t, a, k)
		held, err := f.fill(t, a, k, dlock.WithTTL(60*time.Second))
		if err != nil {
			a.Close()
			t.Fatalf("filling a free %s: %v", f.name, err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		ctx := ctxFor(t, 10*time.Second)
		if _, err := h.TryAcquire(ctx); !errors.Is(err, dlock.ErrClosed) {
			v.violated("TryAcquire on a %s of a closed client: want ErrClosed, got %v", f.name, err)
		}
		if _, err := h.Acquire(ctx); !errors.Is(err, dlock.ErrClosed) {
			v.violated("Acquire on a %s of a closed client: want ErrClosed, got %v", f.name, err)
		}
		for _, ls := range held {
			if !isDone(ls) || !errors.Is(ls.Err(), dlock.ErrClosed) {
				v.violated("a %s lease held at Close: want Done closed with ErrClosed, got Err %v", f.name, ls.Err())
			}
			if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				v.violated("Release after Close: want ErrNotHeld, got %v", err)
			}
		}
		// Close gave the leases up: another client fills the key long before their 60s TTL.
		deadline := time.Now().Add(20 * time.Second)
		for {
			again, err := f.fill(t, b, k)
			if err == nil {
				releaseAll(t, again)
				return
			}
			if time.Now().After(deadline) {
				v.violated("the leases of a closed client were not freed: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond) // a session store frees them as it sees the session end
		}
	}
}

// primDoneAndErr: Done and Err of a lease of family f through release, expiry and
// loss (the mutex's too: doneAndErr).
func (s *suite) primDoneAndErr(f family) func(*testing.T, *verdict) {
	return func(t *testing.T, v *verdict) {
		a := s.client(t)
		k := key(t, "prim-done")
		ls, err := f.contender(t, a, k).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("TryAcquire on a free %s: %v", f.name, err)
		}
		if isDone(ls) || ls.Err() != nil {
			v.violated("a fresh lease: want Done open and Err nil, got Err %v", ls.Err())
		}
		release(t, ls)
		if !isDone(ls) || !errors.Is(ls.Err(), dlock.ErrReleased) {
			v.violated("after Release: want Done closed and ErrReleased, got %v", ls.Err())
		}
		if s.caps.PerLeaseTTL {
			ttl := s.unit
			ls, err := f.contender(t, a, key(t, "prim-done-expiry")).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatalf("TryAcquire on a free %s: %v", f.name, err)
			}
			if _, ok := waitDone(t, ls, ttl+5*time.Second); !ok || !errors.Is(ls.Err(), dlock.ErrExpired) {
				v.violated("a lease past its ttl %v: want Done closed with ErrExpired, got %v", ttl, ls.Err())
			} else {
				wantCause(t, v, "a lease past its ttl", ls, dlock.CauseExpired)
			}
		}
		if vanisher, ok := s.h.(Vanisher); ok && !s.caps.PerLeaseTTL {
			lost := s.client(t)
			ls, err := f.contender(t, lost, key(t, "prim-done-vanish")).TryAcquire(ctxFor(t, 10*time.Second))
			if err != nil {
				t.Fatalf("TryAcquire on a free %s: %v", f.name, err)
			}
			s.cr.rec.fault("client vanished (cut off, as a crashed host)", func() { vanisher.Vanish(t, harnessClient(lost)) })
			if _, ok := waitDone(t, ls, s.caps.SessionTimeout+10*time.Second); !ok || !errors.Is(ls.Err(), dlock.ErrLost) {
				v.violated("a lease whose client vanished (session timeout %v): want Done closed with ErrLost, got %v", s.caps.SessionTimeout, ls.Err())
			} else {
				// Cut off, the client gives the lock up itself (unreachable), or
				// hears that its session ended (a client library that says so).
				wantCause(t, v, "a lease whose client vanished", ls, dlock.CauseUnreachable, dlock.CauseSession)
			}
		}
	}
}

// primFencing: tokens of grants that follow one another (each asked for after the
// previous was granted, some while earlier leases are still held) strictly
// increase where the primitive fences, and are all 0 where it does not.
func (s *suite) primFencing(f family, fenced bool, extra func(t testing.TB, l dlock.Locker, k string) (dlock.Lease, error)) func(*testing.T, *verdict) {
	return func(t *testing.T, v *verdict) {
		clients := []dlock.Locker{s.client(t), s.client(t), s.client(t)}
		k := key(t, "prim-fencing")
		var tokens []uint64
		var prev dlock.Lease
		for i := range 12 {
			l := clients[i%len(clients)]
			var ls dlock.Lease
			var err error
			if extra != nil && i%4 == 3 {
				if prev != nil {
					release(t, prev)
					prev = nil
				}
				ls, err = extra(t, l, k)
			} else {
				ls, err = f.contender(t, l, k).Acquire(ctxFor(t, 30*time.Second), dlock.WithTTL(30*time.Second))
			}
			if err != nil {
				t.Fatalf("grant %d: %v", i, err)
			}
			tokens = append(tokens, ls.Token())
			if prev != nil { // held until the next was granted: grants overlap
				release(t, prev)
			}
			prev = ls
			if extra != nil && i%4 == 3 { // an exclusive lease: alone, and then gone
				release(t, prev)
				prev = nil
			}
		}
		if prev != nil {
			release(t, prev)
		}
		for i, tok := range tokens {
			switch {
			case !fenced && tok != 0:
				v.violated("grant %d has token %d on a %s that declares no fencing (tokens must be 0)", i, tok, f.name)
				return
			case fenced && tok == 0:
				v.violated("grant %d has token 0 on a fenced %s", i, f.name)
			case fenced && i > 0 && tok <= tokens[i-1]:
				v.violated("grant %d has token %d, not above the previous grant's %d", i, tok, tokens[i-1])
			}
		}
		t.Logf("%d grants, tokens %v", len(tokens), tokens)
	}
}

// primReturns: the leases of a holder that vanished (or abandoned them) keep the
// key full until their TTL (or the session timeout), and no longer.
func (s *suite) primReturns(f family) func(*testing.T, *verdict) {
	return func(t *testing.T, v *verdict) {
		k := key(t, "prim-returns")
		a, b := s.client(t), s.client(t)
		vanisher, canVanish := s.h.(Vanisher)
		if !s.caps.PerLeaseTTL && !canVanish {
			t.Skip("session-based backend and the harness has no Vanisher: cannot make a holder vanish")
		}
		ttl := 3 * s.unit
		t0 := time.Now()
		held, err := f.fill(t, a, k, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatalf("filling a free %s: %v", f.name, err)
		}
		if canVanish {
			s.cr.rec.fault("client vanished (cut off, as a crashed host)", func() { vanisher.Vanish(t, harnessClient(a)) })
		} // else: the leases are abandoned, neither refreshed nor released
		bound := ttl
		if !s.caps.PerLeaseTTL {
			bound = s.caps.SessionTimeout
		}
		h := f.contender(t, b, k)
		if s.caps.PerLeaseTTL {
			sleepUntil(t0.Add(ttl / 2))
		}
		early, err := h.TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(ttl))
		switch at := time.Since(t0); {
		case err == nil && (!s.caps.PerLeaseTTL || at < ttl-tolerance):
			v.violated("TryAcquire answered %v after the holder vanished (its leases last %v) and was granted (token %d)", at, bound, early.Token())
			_ = early.Release(ctxFor(t, 10*time.Second))
		case err == nil:
			t.Logf("the mid-TTL TryAcquire answered only %v into a %v TTL; granted, as it may be", at, ttl)
			_ = early.Release(ctxFor(t, 10*time.Second))
		case !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("TryAcquire of a full %s: want ErrNotAcquired, got %v", f.name, err)
		}
		ls, err := h.Acquire(ctxFor(t, 3*bound+10*time.Second), dlock.WithTTL(ttl))
		if err != nil {
			v.violated("the %s of a vanished holder (leases of %v) was still full %v later: %v", f.name, bound, time.Since(t0).Round(time.Millisecond), err)
			return
		}
		granted := time.Since(t0)
		if s.caps.PerLeaseTTL && granted < ttl-tolerance {
			v.violated("granted again after %v, before the vanished holder's %v TTL ended", granted, ttl)
		}
		t.Logf("granted again %v after the vanished holder's acquire (leases of %v)", granted.Round(time.Millisecond), bound)
		for _, h := range held {
			if !isDone(h) {
				v.violated("another client was granted while a vanished holder's lease had not ended (Done open)")
			}
		}
		release(t, ls)
	}
}

// gauge is the oracle of the primitives: the resource they protect, which every
// holder enters and leaves around its critical section. It records each entry that
// broke the primitive's rule — more than limit inside (a semaphore), an exclusive
// holder not alone or a shared one beside an exclusive one (a read-write lock) —
// and the most holders it saw inside at once. Safe for concurrent use.
type gauge struct {
	limit int       // a semaphore's limit; 0 for a read-write lock
	rec   *recorder // nil, or the suite's: entries and leaves go into its histories

	mu         sync.Mutex
	inside     map[string]bool // holder → exclusive
	peak       int
	violations []string
}

func newGauge(limit int) *gauge { return &gauge{limit: limit, inside: map[string]bool{}} }

// newRecordedGauge is a gauge whose entries and leaves go into rec's histories.
func newRecordedGauge(limit int, rec *recorder) *gauge {
	g := newGauge(limit)
	g.rec = rec
	return g
}

func (g *gauge) enter(holder string, exclusive bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rec != nil {
		kind := "shared"
		if exclusive || g.limit > 0 {
			kind = "exclusive"
		}
		g.rec.hist().add(Event{Client: holder, Op: OpEnter, Phase: OK, Kind: kind, Limit: g.limit})
	}
	switch {
	case g.limit > 0 && len(g.inside) >= g.limit:
		g.violations = append(g.violations, fmt.Sprintf("%s entered while %d holders were inside (limit %d): %v", holder, len(g.inside), g.limit, keys(g.inside)))
	case g.limit == 0 && exclusive && len(g.inside) > 0:
		g.violations = append(g.violations, fmt.Sprintf("exclusive %s entered while %v were inside", holder, keys(g.inside)))
	case g.limit == 0 && !exclusive:
		for other, x := range g.inside {
			if x {
				g.violations = append(g.violations, fmt.Sprintf("shared %s entered while exclusive %s was inside", holder, other))
			}
		}
	}
	g.inside[holder] = exclusive
	g.peak = max(g.peak, len(g.inside))
}

func (g *gauge) leave(holder string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rec != nil {
		g.rec.hist().add(Event{Client: holder, Op: OpLeave})
	}
	delete(g.inside, holder)
}

func (g *gauge) report() (violations []string, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.violations...), g.peak
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// contend runs clients goroutines, each rounds times taking a lease through
// pick(client, round), entering g around a short critical section, and releasing.
func (s *suite) contend(t *testing.T, g *gauge, clients, rounds int, pick func(c, r int, l dlock.Locker) (handle, bool)) {
	var wg sync.WaitGroup
	for c := range clients {
		l := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				h, exclusive := pick(c, r, l)
				holder := fmt.Sprintf("client%d/round%d", c, r)
				ls, err := h.Acquire(ctxFor(t, 60*time.Second), dlock.WithTTL(30*time.Second))
				if err != nil {
					t.Errorf("%s: Acquire: %v", holder, err)
					return
				}
				g.enter(holder, exclusive)
				time.Sleep(time.Millisecond) // the critical section's work
				g.leave(holder)
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Errorf("%s: Release: %v", holder, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
