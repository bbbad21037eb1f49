package conformance

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// The simultaneous try: a scheduled job fires on every node at the same moment and
// must run on exactly one. A store that decides by votes (Redlock) can split them so
// that every contender loses.
const (
	// tryContenders is how many clients call TryAcquire in one burst.
	tryContenders = 10
	// tryBursts is how many bursts on a free key must each have exactly one winner.
	tryBursts = 40
	// tryBurstsWeak is how many bursts a declared weakness may take to show.
	tryBurstsWeak = 400
	// tryBurstsHeld is how many bursts on a held key must have no winner.
	tryBurstsHeld = 5
	// tryBound bounds each TryAcquire of a burst: one attempt does not wait for the
	// winner's release (the winners hold until every attempt returned).
	tryBound = 5 * time.Second
	// freshEvery: every so many bursts the contenders are new clients, whose first
	// request also dials (as a job's freshly started processes would), and the
	// bursts in between reuse them.
	freshEvery = 4
)

// burst is the outcome of one burst of simultaneous TryAcquires.
type burst struct {
	winners []int // the contenders granted the lock, with their leases in leases
	leases  []dlock.Lease
	others  []error // errors other than ErrNotAcquired, by contender
	waited  []int   // contenders whose TryAcquire was still waiting after tryBound
}

// tryAtOnce has every client TryAcquire k at the same moment (they wait at a barrier
// until all are ready) and returns who won. The winners keep their leases until every
// attempt has returned, so that a late attempt cannot win after a release.
func tryAtOnce(t testing.TB, clients []dlock.Locker, k string) burst {
	var b burst
	var mu sync.Mutex
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ctx := ctxFor(t, tryBound)
	for i, l := range clients {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			ls, err := l.TryAcquire(ctx, k, dlock.WithTTL(30*time.Second))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				b.winners = append(b.winners, i)
				b.leases = append(b.leases, ls)
			case ctx.Err() != nil:
				b.waited = append(b.waited, i)
			case !errors.Is(err, dlock.ErrNotAcquired):
				b.others = append(b.others, fmt.Errorf("contender %d: %w", i, err))
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return b
}

func (b burst) release(t testing.TB) {
	for _, ls := range b.leases {
		_ = ls.Release(ctxFor(t, 10*time.Second))
	}
}

// simultaneousTry: tryContenders clients, each a Locker of its own, TryAcquire one free
// key at the same moment, burst after burst (each on a key of its own): exactly one
// must win every burst. Then, with the key held by another client, no one may win.
// A burst in which a contender failed otherwise (the store unavailable) is not
// counted. A TryAcquire still waiting tryBound later is a violation too: one attempt
// must not wait for the winner's release. For a declared weakness the bursts go on
// until one of them shows a violation, up to tryBurstsWeak.
func (s *suite) simultaneousTry(t *testing.T, v *verdict) {
	bursts := tryBursts
	if s.caps.Weak(spec.SimultaneousTry) {
		bursts = tryBurstsWeak // until the violation shows
	}
	var clients []dlock.Locker
	closeClients := func() {
		var wg sync.WaitGroup
		for _, l := range clients {
			wg.Go(func() { _ = l.Close() })
		}
		wg.Wait()
		clients = nil
	}
	defer closeClients()
	counted, none, uncounted := 0, 0, 0
	weak := s.caps.Weak(spec.SimultaneousTry)
	for i := 0; i < bursts && !(weak && len(v.list()) > 0); i++ {
		if i%freshEvery == 0 {
			closeClients()
			for range tryContenders {
				clients = append(clients, s.unmanaged(t, "contender"))
			}
		}
		k := key(t, fmt.Sprintf("simultaneous%d", i))
		b := tryAtOnce(t, clients, k)
		b.release(t)
		if len(b.waited) > 0 {
			v.violated("burst %d: %d TryAcquires (contenders %v) were still waiting %v later: one attempt must not wait for the winner",
				i, len(b.waited), b.waited, tryBound)
		}
		if len(b.others) > 0 {
			uncounted++
			t.Logf("burst %d not counted: %v", i, errors.Join(b.others...))
			if uncounted > bursts/4 {
				t.Fatalf("%d of %d bursts had contenders fail other than with ErrNotAcquired, e.g. %v", uncounted, i+1, b.others[0])
			}
			continue
		}
		counted++
		switch n := len(b.winners); {
		case n == 0:
			none++
			v.violated("burst %d: none of %d clients that called TryAcquire on a free key at once was granted it", i, tryContenders)
		case n > 1:
			v.violated("burst %d: %d of %d clients were granted one key at once (contenders %v)", i, n, tryContenders, b.winners)
		}
	}
	t.Logf("%d bursts of %d simultaneous TryAcquires counted (%d not counted), %d without a winner", counted, tryContenders, uncounted, none)

	holder := s.client(t)
	k := key(t, "simultaneous-held")
	la := mustAcquire(t, holder, k, dlock.WithTTL(time.Minute))
	for i := range tryBurstsHeld {
		if i%freshEvery == 0 {
			closeClients()
			for range tryContenders {
				clients = append(clients, s.unmanaged(t, "contender"))
			}
		}
		b := tryAtOnce(t, clients, k)
		b.release(t)
		if len(b.waited) > 0 {
			v.violated("held key, burst %d: %d TryAcquires were still waiting %v later", i, len(b.waited), tryBound)
		}
		if n := len(b.winners); n > 0 {
			v.violated("held key, burst %d: %d of %d simultaneous TryAcquires were granted it (contenders %v)", i, n, tryContenders, b.winners)
		}
	}
	release(t, la)
}
