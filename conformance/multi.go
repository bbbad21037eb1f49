package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// The properties of all-or-nothing locks on a set of keys
// (spec.MultiKeyProperties), for a backend that declares Capabilities.MultiKey.

func init() {
	primitiveChecks = append(primitiveChecks, (*suite).multiKeyChecks)
}

func (s *suite) multiKeyChecks(t *testing.T) {
	p := s.caps.MultiKey
	if p == nil {
		return
	}
	ps := s.forPrimitive(p)
	checks := map[spec.Property]func(*testing.T, *verdict){
		spec.MultiKeyExclusion:       func(t *testing.T, v *verdict) { ps.multiKeyExclusion(t, v, p) },
		spec.MultiKeyAllOrNothing:    ps.multiKeyAllOrNothing,
		spec.MultiKeyDeadlockFreedom: ps.multiKeyDeadlockFreedom,
	}
	for _, prop := range spec.MultiKeyProperties {
		ps.property(t, prop, checks[prop])
	}
}

// keySet returns n keys no other test uses.
func keySet(t testing.TB, name string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = key(t, fmt.Sprintf("%s%d", name, i))
	}
	return ks
}

// randomSet picks between lo and hi distinct keys of ks, in random order.
func randomSet(r *rand.Rand, ks []string, lo, hi int) []string {
	n := lo + r.IntN(hi-lo+1)
	out := make([]string, 0, n)
	for _, i := range r.Perm(len(ks))[:n] {
		out = append(out, ks[i])
	}
	return out
}

// multiKeyExclusion: set leases and plain mutexes on overlapping keys, each key's
// resource sees one holder at a time; with fencing, each key's tokens increase.
func (s *suite) multiKeyExclusion(t *testing.T, v *verdict, p *spec.Primitive) {
	const setClients, mutexClients, rounds = 4, 3, 6
	ks := keySet(t, "mexcl", 4)
	res := map[string]*Resource{}
	tokens := map[string][]uint64{}
	for _, k := range ks {
		res[k] = NewResource(false)
	}
	var mu sync.Mutex
	enter := func(holder, k string, tok uint64) {
		res[k].Enter(holder, tok)
		mu.Lock()
		tokens[k] = append(tokens[k], tok)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range setClients + mutexClients {
		l := s.client(t)
		r := rand.New(rand.NewPCG(uint64(c), 21))
		wg.Go(func() {
			holder := fmt.Sprintf("client%d", c)
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var ls dlock.Lease
				var held []string
				var err error
				if c < setClients {
					held = randomSet(r, ks, 2, 3)
					ls, err = acquireAll(ctx, l, held, dlock.WithTTL(30*time.Second))
				} else {
					held = randomSet(r, ks, 1, 1)
					ls, err = l.Acquire(ctx, held[0], dlock.WithTTL(30*time.Second))
				}
				cancel()
				if err != nil {
					t.Errorf("%s: acquire %q: %v", holder, held, err)
					return
				}
				for _, k := range held {
					tok := ls.Token()
					if sl, ok := unwrapLease(ls).(*dlock.SetLease); ok {
						tok = sl.TokenOf(k)
					}
					enter(holder, k, tok)
				}
				time.Sleep(200 * time.Microsecond) // the critical section's work
				for _, k := range held {
					res[k].Leave(holder)
				}
				if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
					t.Errorf("%s: release %q: %v", holder, held, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, k := range ks {
		for _, o := range res[k].Overlaps() {
			v.violated("key %q: %s", k, o)
		}
		if !p.Fencing {
			continue
		}
		ts := tokens[k]
		for i := 1; i < len(ts); i++ {
			if ts[i] <= ts[i-1] {
				v.violated("key %q: grant %d has token %d, not above the grant before's %d", k, i, ts[i], ts[i-1])
			}
		}
	}
}

// expectFree takes and releases each key at once, recording a violation for a key
// found held.
func expectFree(t testing.TB, v *verdict, l dlock.Locker, ks []string, what string) {
	t.Helper()
	for _, k := range ks {
		ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			v.violated("%s: key %q is held: %v", what, k, err)
			continue
		}
		release(t, ls)
	}
}

// multiKeyAllOrNothing: attempts that fail leave nothing held, a set's Release
// frees every key, and a set lease ends when one of its keys is lost.
func (s *suite) multiKeyAllOrNothing(t *testing.T, v *verdict) {
	a, b, c := s.client(t), s.client(t), s.client(t)
	ks := keySet(t, "mall", 3)
	others := []string{ks[0], ks[2]}

	// One key held: TryAcquireAll and a timed-out AcquireAll take none of them.
	// The attempts meant to fail ask for a short TTL: what a flawed one leaves
	// behind frees soon.
	short := dlock.WithTTL(2 * s.unit)
	la := mustAcquire(t, a, ks[1], dlock.WithTTL(30*time.Second))
	if ls, err := tryAcquireAll(ctxFor(t, 10*time.Second), b, ks, short); !errors.Is(err, dlock.ErrNotAcquired) {
		v.violated("TryAcquireAll with %q held: want ErrNotAcquired, got %v", ks[1], err)
		if err == nil {
			release(t, ls)
		}
	}
	expectFree(t, v, c, others, "after a failed TryAcquireAll")
	_, err := acquireAll(ctxFor(t, 300*time.Millisecond), b, ks, short)
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		v.violated("AcquireAll with %q held and a 300ms ctx: want ErrNotAcquired joined with DeadlineExceeded, got %v", ks[1], err)
	}
	expectFree(t, v, c, others, "after an AcquireAll that timed out")

	// The key comes free: a waiting AcquireAll takes the whole set.
	got := make(chan dlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		ls, err := acquireAll(ctxFor(t, time.Minute), b, ks, dlock.WithTTL(30*time.Second))
		if err != nil {
			errc <- err
			return
		}
		got <- ls
	}()
	time.Sleep(100 * time.Millisecond) // let it wait; a release before must work too
	release(t, la)
	var set dlock.Lease
	select {
	case set = <-got:
	case err := <-errc:
		t.Fatalf("AcquireAll after the held key was released: %v", err)
	}
	if set.Key() != dlock.SetKey(ks) {
		v.violated("the set lease's Key() = %q, want %q", set.Key(), dlock.SetKey(ks))
	}
	for _, k := range ks {
		expectNotAcquired(t, v, c, k, "a key of a held set")
	}
	release(t, set)
	expectFree(t, v, c, ks, "after the set's Release")

	// A key deleted behind the set's back: the set lease ends (found by its renewal,
	// or by the store's session watch).
	if d, ok := s.h.(KeyDeleter); ok && (s.caps.Refresh || !s.caps.PerLeaseTTL) {
		ttl := 2 * s.unit
		ks := keySet(t, "mlost", 2)
		opts := []dlock.Option{dlock.WithTTL(ttl)}
		if s.caps.Refresh {
			opts = append(opts, dlock.WithAutoRenew())
		}
		set, err := tryAcquireAll(ctxFor(t, 10*time.Second), b, ks, opts...)
		if err != nil {
			t.Fatalf("TryAcquireAll of free keys: %v", err)
		}
		s.cr.rec.fault("key deleted behind its holder", func() { d.DeleteKey(t, ks[1]) })
		if _, ok := waitDone(t, set, 2*ttl+5*time.Second); !ok || !errors.Is(set.Err(), dlock.ErrLost) {
			v.violated("a set lease one of whose keys was deleted: want Done closed with ErrLost, got %v", set.Err())
		}
		// The set's other key frees too (given back, or at its TTL).
		if ls, err := c.Acquire(ctxFor(t, 3*ttl+2*time.Second), ks[0], dlock.WithTTL(30*time.Second)); err != nil {
			v.violated("the other key of a lost set was still held %v later: %v", 3*ttl, err)
		} else {
			release(t, ls)
		}
	}
}

// multiKeyDeadlockFreedom: clients take random overlapping sets, given in random
// order, some waiting and some trying once, and all finish; afterwards no key is
// held.
func (s *suite) multiKeyDeadlockFreedom(t *testing.T, v *verdict) {
	const clients, rounds = 6, 6
	const bound = 20 * time.Second
	ks := keySet(t, "mdead", 5)
	var wg sync.WaitGroup
	var mu sync.Mutex
	grants, failed := 0, 0
	for c := range clients {
		l := s.client(t)
		r := rand.New(rand.NewPCG(uint64(c), 5))
		wg.Go(func() {
			for i := range rounds {
				set := randomSet(r, ks, 2, 4)
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				var ls dlock.Lease
				var err error
				if c%3 == 2 { // some only try
					ls, err = tryAcquireAll(ctx, l, set, dlock.WithTTL(30*time.Second))
				} else {
					ls, err = acquireAll(ctx, l, set, dlock.WithTTL(30*time.Second))
				}
				cancel()
				switch {
				case err == nil:
					mu.Lock()
					grants++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
						t.Errorf("client %d: release %q: %v", c, set, err)
						return
					}
				case c%3 == 2 && errors.Is(err, dlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded):
					mu.Lock()
					failed++
					mu.Unlock()
				case errors.Is(err, context.DeadlineExceeded):
					v.violated("client %d, round %d: no progress on %q in %v (deadlock?): %v", c, i, set, bound, err)
					return
				default:
					t.Errorf("client %d: %q: %v", c, set, err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d sets granted, %d attempts failed", grants, failed)
	expectFree(t, v, s.client(t), ks, "after every client finished")
}
