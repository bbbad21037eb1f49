package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// expectNotAcquired calls TryAcquire on a key another owner should hold and records
// a violation (and releases the surprise lease) if it was granted.
func expectNotAcquired(t testing.TB, v *verdict, l dlock.Locker, k, what string) {
	t.Helper()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
	switch {
	case err == nil:
		v.violated("%s: TryAcquire(%q) was granted (token %d)", what, k, ls.Token())
		_ = ls.Release(ctxFor(t, 10*time.Second))
	case !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("%s: TryAcquire(%q): want ErrNotAcquired, got %v", what, k, err)
	}
}

func (s *suite) mutualExclusion(t *testing.T, v *verdict) {
	const clients, rounds = 8, 8
	k := key(t, "mutex")
	res := NewResource(false)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		l := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("client%d", c)
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				ls, err := l.Acquire(ctx, k, dlock.WithTTL(30*time.Second))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("%s: Acquire: %w", holder, err)
					return
				}
				res.Enter(holder, ls.Token())
				runtime.Gosched()
				time.Sleep(200 * time.Microsecond) // the critical section's work
				res.Leave(holder)
				if err := ls.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("%s: Release: %w", holder, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, o := range res.Overlaps() {
		v.violated("%s", o)
	}
	n, _ := res.Stats()
	t.Logf("%d grants to %d clients, %d overlaps", n, clients, len(res.Overlaps()))
}

// tolerance is the expiry resolution of the stores (milliseconds).
const tolerance = 2 * time.Millisecond

func (s *suite) deadlockFreedom(t *testing.T, v *verdict) {
	k := key(t, "deadlock")
	a, b := s.client(t), s.client(t)
	vanisher, canVanish := s.h.(Vanisher)
	if !s.caps.PerLeaseTTL {
		if !canVanish {
			t.Skip("session-based backend and the harness has no Vanisher: cannot make a holder vanish")
		}
		la := mustAcquire(t, a, k)
		vanishedAt := time.Now()
		s.cr.rec.fault("client vanished (cut off, as a crashed host)", func() { vanisher.Vanish(t, harnessClient(a)) })
		expectNotAcquired(t, v, b, k, "right after the holder vanished, before its session timed out")
		ls, err := b.Acquire(ctxFor(t, s.caps.SessionTimeout+10*time.Second), k)
		if err != nil {
			v.violated("the lock of a holder that vanished %v ago (session timeout %v) was never freed: %v",
				time.Since(vanishedAt).Round(time.Millisecond), s.caps.SessionTimeout, err)
			return
		}
		t.Logf("granted %v after the holder vanished (session timeout %v)", time.Since(vanishedAt).Round(time.Millisecond), s.caps.SessionTimeout)
		if !isDone(la) {
			v.violated("another client was granted the lock while the vanished holder's lease had not ended (Done open)")
		}
		release(t, ls)
		return
	}
	ttl := 3 * s.unit
	t0 := time.Now()
	la := mustAcquire(t, a, k, dlock.WithTTL(ttl))
	if canVanish {
		s.cr.rec.fault("client vanished (cut off, as a crashed host)", func() { vanisher.Vanish(t, harnessClient(a)) })
	} // else: the lease is abandoned, neither refreshed nor released
	sleepUntil(t0.Add(ttl / 2))
	early, err := b.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	switch at := time.Since(t0); {
	case err == nil && at < ttl-tolerance:
		v.violated("TryAcquire answered %v into the vanished holder's %v TTL, and granted the lock (token %d)", at, ttl, early.Token())
		_ = early.Release(ctxFor(t, 10*time.Second))
	case err == nil:
		// On a busy machine the answer came after the TTL: not a violation.
		t.Logf("the mid-TTL TryAcquire answered only %v into a %v TTL; granted, as it may be", at, ttl)
		_ = early.Release(ctxFor(t, 10*time.Second))
	case !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("TryAcquire of a held key: want ErrNotAcquired, got %v", err)
	}
	ls, err := b.Acquire(ctxFor(t, 3*ttl+2*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		v.violated("a vanished holder's lock (ttl %v) was still held %v later: %v", ttl, time.Since(t0).Round(time.Millisecond), err)
		return
	}
	granted := time.Since(t0)
	if granted < ttl-tolerance {
		v.violated("granted again after %v, before the holder's %v TTL ended", granted, ttl)
	}
	t.Logf("granted again %v after the vanished holder's acquire (ttl %v)", granted.Round(time.Millisecond), ttl)
	if !isDone(la) {
		v.violated("another client was granted the lock while the vanished holder's lease had not ended (Done open)")
	}
	release(t, ls)
}

func (s *suite) ownerOnlyRelease(t *testing.T, v *verdict) {
	a, b, c := s.client(t), s.client(t), s.client(t)

	// A released lease cannot release again, and cannot free its successor's lock.
	k := key(t, "owner")
	la := mustAcquire(t, a, k, dlock.WithTTL(30*time.Second))
	release(t, la)
	if err := la.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		v.violated("second Release of one lease: want ErrNotHeld, got %v", err)
	}
	lb := mustAcquire(t, b, k, dlock.WithTTL(30*time.Second))
	if err := la.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
		v.violated("Release of a released lease after another owner took the key: want ErrNotHeld, got %v", err)
	}
	expectNotAcquired(t, v, c, k, "after a former owner's Release")
	release(t, lb)

	// A lease that expired cannot release or refresh the lock of the owner after it.
	if s.caps.PerLeaseTTL {
		k := key(t, "owner-expired")
		ttl := s.unit
		la := mustAcquire(t, a, k, dlock.WithTTL(ttl))
		lb, err := b.Acquire(ctxFor(t, 3*ttl+10*time.Second), k, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatalf("Acquire after the first lease's %v TTL: %v", ttl, err)
		}
		if err := la.Release(ctxFor(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotHeld) {
			v.violated("Release of an expired lease whose key was granted again: want ErrNotHeld, got %v", err)
		}
		if s.caps.Refresh {
			if err := la.Refresh(ctxFor(t, 10*time.Second), 30*time.Second); !errors.Is(err, dlock.ErrNotHeld) {
				v.violated("Refresh of an expired lease whose key was granted again: want ErrNotHeld, got %v", err)
			}
		}
		expectNotAcquired(t, v, c, k, "after the expired former owner's Release")
		if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
			v.violated("the new owner's Release after a stale Release: %v", err)
		}
	}

	// A lease whose lock was deleted behind its back (still valid by its own clock)
	// cannot release or refresh the new owner's lock: the store checks the owner.
	// Release and Refresh are each tried on a lock of their own (the first "not ours"
	// answer ends the lease, and the second call would not reach the store).
	if d, ok := s.h.(KeyDeleter); ok {
		stale := func(name string, call func(dlock.Lease) error) {
			k := key(t, name)
			la := mustAcquire(t, a, k, dlock.WithTTL(30*time.Second))
			s.cr.rec.fault("key deleted behind its holder", func() { d.DeleteKey(t, k) })
			lb := mustAcquire(t, b, k, dlock.WithTTL(30*time.Second))
			if err := call(la); !errors.Is(err, dlock.ErrNotHeld) {
				v.violated("%s by a lease whose lock was deleted and granted again: want ErrNotHeld, got %v", name, err)
			}
			expectNotAcquired(t, v, c, k, "after a stale owner's "+name)
			if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
				v.violated("the new owner's Release after a stale %s: %v", name, err)
			}
		}
		stale("Release", func(l dlock.Lease) error { return l.Release(ctxFor(t, 10*time.Second)) })
		if s.caps.Refresh {
			stale("Refresh", func(l dlock.Lease) error { return l.Refresh(ctxFor(t, 10*time.Second), 30*time.Second) })
		}
	}
}

func (s *suite) expiry(t *testing.T, v *verdict) {
	if !s.caps.PerLeaseTTL {
		t.Skip("no per-lease TTL: leases last as long as the session")
	}
	k := key(t, "expiry")
	a, b := s.client(t), s.client(t)
	ttl := max(5*s.unit, 500*time.Millisecond)
	t0 := time.Now()
	la := mustAcquire(t, a, k, dlock.WithTTL(ttl))
	doneAt := make(chan time.Time, 1)
	go func() { <-la.Done(); doneAt <- time.Now() }()
	// At its TTL (counted from before the acquire) the lease must read as ended.
	sleepUntil(t0.Add(ttl))
	if err := la.Err(); !errors.Is(err, dlock.ErrExpired) {
		v.violated("at its ttl %v the lease reads Err %v, want ErrExpired", ttl, err)
	} else {
		wantCause(t, v, "a lease past its ttl", la, dlock.CauseExpired)
	}
	lb, err := b.Acquire(ctxFor(t, 3*ttl+10*time.Second), k, dlock.WithTTL(30*time.Second))
	grantedAt := time.Now()
	if err != nil {
		v.violated("a lease with ttl %v never expired: %v", ttl, err)
		return
	}
	defer release(t, lb)
	if !isDone(la) {
		v.violated("another client was granted the lock %v after the acquire, while the first lease (ttl %v) had not ended (Done open)",
			grantedAt.Sub(t0), ttl)
		return
	}
	select {
	case end := <-doneAt:
		if held := end.Sub(t0); held < ttl/2 {
			v.violated("the lease ended %v after its acquire, before half its ttl %v", held, ttl)
		}
		t.Logf("lease ended %v after acquire, %v before the next grant (ttl %v)",
			end.Sub(t0).Round(time.Millisecond), grantedAt.Sub(end).Round(time.Millisecond), ttl)
	case <-time.After(10 * time.Second):
		v.violated("Done reads as closed but a goroutine waiting on it was not woken")
	}
}

func (s *suite) refresh(t *testing.T, v *verdict) {
	a, b := s.client(t), s.client(t)
	k := key(t, "refresh")
	if !s.caps.Refresh {
		la := mustAcquire(t, a, k)
		if err := la.Refresh(ctxFor(t, 10*time.Second), time.Second); !errors.Is(err, errors.ErrUnsupported) {
			v.violated("Refresh on a backend without refresh: want errors.ErrUnsupported, got %v", err)
		}
		release(t, la)
		return
	}
	ttl := 4 * s.unit
	t0 := time.Now()
	la := mustAcquire(t, a, k, dlock.WithTTL(ttl))
	if err := la.Refresh(ctxFor(t, 10*time.Second), 0); !errors.Is(err, dlock.ErrInvalidTTL) {
		v.violated("Refresh(0): want ErrInvalidTTL, got %v", err)
	}
	sleepUntil(t0.Add(ttl / 2))
	if err := la.Refresh(ctxFor(t, 10*time.Second), ttl); err != nil {
		v.violated("Refresh of a held lease: %v", err)
		return
	}
	sleepUntil(t0.Add(ttl + ttl/4))
	expectNotAcquired(t, v, b, k, "past the first TTL of a refreshed lease")
	if isDone(la) {
		v.violated("a refreshed lease ended at its first TTL: %v", la.Err())
	}
	release(t, la)

	// WithAutoRenew keeps a lease for several TTLs.
	k = key(t, "autorenew")
	ttl = 2 * s.unit
	la = mustAcquire(t, a, k, dlock.WithTTL(ttl), dlock.WithAutoRenew())
	time.Sleep(3 * ttl)
	expectNotAcquired(t, v, b, k, fmt.Sprintf("%v into an auto-renewed lease with ttl %v", 3*ttl, ttl))
	if err := la.Err(); err != nil {
		v.violated("an auto-renewed lease ended after %v (ttl %v): %v", 3*ttl, ttl, err)
		return
	}
	release(t, la)
	if !errors.Is(la.Err(), dlock.ErrReleased) {
		v.violated("Err after Release of an auto-renewed lease: want ErrReleased, got %v", la.Err())
	}
}

func (s *suite) tryAcquire(t *testing.T, v *verdict) {
	a, b := s.client(t), s.client(t)
	k := key(t, "try")
	ttl := 30 * time.Second
	la := mustAcquire(t, a, k, dlock.WithTTL(ttl))
	t0 := time.Now()
	_, err := b.TryAcquire(ctxFor(t, time.Minute), k, dlock.WithTTL(ttl))
	took := time.Since(t0)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		v.violated("TryAcquire of a held key: want ErrNotAcquired, got %v", err)
	}
	if took > 5*time.Second {
		v.violated("TryAcquire of a held key waited %v (one attempt expected)", took)
	}
	release(t, la)
	lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		v.violated("TryAcquire right after the holder's Release: %v", err)
		return
	}
	release(t, lb)
}

func (s *suite) cancellation(t *testing.T, v *verdict) {
	a, b, c := s.client(t), s.client(t), s.client(t)
	k := key(t, "cancel")
	la := mustAcquire(t, a, k, dlock.WithTTL(60*time.Second))

	const timeout = 300 * time.Millisecond
	const prompt = time.Second // how late after ctx's end a return still counts as prompt
	t0 := time.Now()
	_, err := b.Acquire(ctxFor(t, timeout), k, dlock.WithTTL(60*time.Second))
	took := time.Since(t0)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNotAcquired) {
		v.violated("Acquire with an expiring ctx: want ErrNotAcquired joined with context.DeadlineExceeded, got %v", err)
	}
	if took > timeout+prompt {
		v.violated("Acquire returned %v after a %v ctx deadline", took-timeout, timeout)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		err error
		at  time.Time
	}
	out := make(chan result, 1)
	go func() {
		_, err := b.Acquire(ctx, k, dlock.WithTTL(60*time.Second))
		out <- result{err, time.Now()}
	}()
	time.Sleep(timeout) // let the waiter start waiting; cancelling earlier must work too
	cancelled := time.Now()
	cancel()
	r := <-out
	if !errors.Is(r.err, context.Canceled) || !errors.Is(r.err, dlock.ErrNotAcquired) {
		v.violated("Acquire with a cancelled ctx: want ErrNotAcquired joined with context.Canceled, got %v", r.err)
	}
	if late := r.at.Sub(cancelled); late > prompt {
		v.violated("Acquire returned %v after its ctx was cancelled", late)
	}

	release(t, la)
	lc, err := c.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		v.violated("after two cancelled waits and the holder's Release, TryAcquire found the key held: %v", err)
		return
	}
	release(t, lc)
	s.cancelledWaitLeavesNothing(t, v, a, b, c)
}

func (s *suite) fencingMonotonic(t *testing.T, v *verdict) {
	const clients, rounds = 4, 25
	k := key(t, "fencing")
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	for c := range clients {
		l := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				ls, err := l.Acquire(ctx, k, dlock.WithTTL(30*time.Second))
				cancel()
				if err != nil {
					t.Errorf("client %d: Acquire: %v", c, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, ls.Token())
				mu.Unlock()
				if err := ls.Release(context.Background()); err != nil {
					t.Errorf("client %d: Release: %v", c, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !s.caps.Fencing {
		for i, tok := range tokens {
			if tok != 0 {
				v.violated("grant %d has token %d on a backend that declares no fencing (tokens must be 0)", i, tok)
				return
			}
		}
		return
	}
	for i, tok := range tokens {
		if tok == 0 {
			v.violated("grant %d has token 0 on a fencing backend", i)
		}
		if i > 0 && tok <= tokens[i-1] {
			v.violated("grant %d has token %d, not above the previous grant's %d", i, tok, tokens[i-1])
		}
	}
	t.Logf("%d grants, tokens %d..%d", len(tokens), tokens[0], tokens[len(tokens)-1])
}

func (s *suite) keyIsolation(t *testing.T, v *verdict) {
	a, b := s.client(t), s.client(t)
	k := key(t, "iso")
	la := mustAcquire(t, a, k, dlock.WithTTL(30*time.Second))
	for _, other := range []string{k + "x", k[:len(k)-1], strings.ToUpper(k), k + "/", "/" + k, " " + k, k + "\x00"} {
		ls, err := b.TryAcquire(ctxFor(t, 10*time.Second), other)
		if err != nil {
			v.violated("holding %q blocks %q: %v", k, other, err)
			continue
		}
		release(t, ls)
	}
	release(t, la)
}

// ValidKeys are unusual keys that every backend must accept, each a lock of its own.
func ValidKeys() []string {
	return []string{
		"a/b", "a", "b", "a//b", "/a", "a/", "../x", "x", "./x", ".", "..", "/", "\\", "a\\b",
		"{tag}", "tag", "{tag}x", "'", `"`, "`", "'; DROP TABLE x; --", " ", "  ", "a b", "%", "_", "a%", "a_",
		"ключ", "鍵", "🔒", "e\u0301", "\u00e9", "a\x00b", "a\nb", "*", "?", "#",
		strings.Repeat("k", dlock.MaxKeyLen),
		strings.Repeat("k", dlock.MaxKeyLen-1) + "j",
		strings.Repeat("é", 127) + "k", // 255 bytes
		strings.Repeat("/", dlock.MaxKeyLen),
	}
}

// invalidKeys are keys every backend must reject with ErrInvalidKey.
func invalidKeys() []string {
	return []string{"", strings.Repeat("k", dlock.MaxKeyLen+1), "\xff", "a\xc3", strings.Repeat("é", 128)}
}

func (s *suite) inputValidation(t *testing.T, v *verdict) {
	a, b := s.client(t), s.client(t)
	ctx := ctxFor(t, time.Minute)
	for _, bad := range invalidKeys() {
		if _, err := a.TryAcquire(ctx, bad); !errors.Is(err, dlock.ErrInvalidKey) {
			v.violated("TryAcquire(%q): want ErrInvalidKey, got %v", bad, err)
		}
		if _, err := a.Acquire(ctx, bad); !errors.Is(err, dlock.ErrInvalidKey) {
			v.violated("Acquire(%q): want ErrInvalidKey, got %v", bad, err)
		}
	}
	k := key(t, "ttl")
	for _, ttl := range []time.Duration{0, -time.Second, dlock.MaxTTL + 1, math.MaxInt64} {
		if _, err := a.TryAcquire(ctx, k, dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrInvalidTTL) {
			v.violated("TryAcquire with ttl %v: want ErrInvalidTTL, got %v", ttl, err)
		}
		if _, err := a.Acquire(ctx, k, dlock.WithTTL(ttl)); !errors.Is(err, dlock.ErrInvalidTTL) {
			v.violated("Acquire with ttl %v: want ErrInvalidTTL, got %v", ttl, err)
		}
	}
	// The longest TTL is one the store can hold.
	if ls, err := a.TryAcquire(ctx, k, dlock.WithTTL(dlock.MaxTTL)); err != nil {
		v.violated("TryAcquire with ttl MaxTTL (%v): %v", dlock.MaxTTL, err)
	} else if err := ls.Release(ctx); err != nil {
		v.violated("Release of a lease with ttl MaxTTL: %v", err)
	}
	// Hold every odd key at once: if two mapped to one lock, the second grant fails.
	var held []dlock.Lease
	for _, k := range ValidKeys() {
		ls, err := a.TryAcquire(ctx, k, dlock.WithTTL(60*time.Second))
		if err != nil {
			v.violated("TryAcquire(%q) while holding the other odd keys: %v", k, err)
			continue
		}
		if ls.Key() != k {
			v.violated("Key() = %q, want %q", ls.Key(), k)
		}
		held = append(held, ls)
	}
	for _, ls := range held {
		expectNotAcquired(t, v, b, ls.Key(), "a held odd key, from another client")
	}
	for _, ls := range held {
		if err := ls.Release(ctx); err != nil {
			v.violated("Release(%q): %v", ls.Key(), err)
		}
	}
}

func (s *suite) close(t *testing.T, v *verdict) {
	a, b := s.unmanaged(t, "closing"), s.client(t)
	k := key(t, "close")
	la := mustAcquire(t, a, k, dlock.WithTTL(60*time.Second))
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		v.violated("second Close: want nil (idempotent), got %v", err)
	}
	ctx := ctxFor(t, 10*time.Second)
	if _, err := a.TryAcquire(ctx, key(t, "closed")); !errors.Is(err, dlock.ErrClosed) {
		v.violated("TryAcquire after Close: want ErrClosed, got %v", err)
	}
	if _, err := a.Acquire(ctx, key(t, "closed")); !errors.Is(err, dlock.ErrClosed) {
		v.violated("Acquire after Close: want ErrClosed, got %v", err)
	}
	if !isDone(la) || !errors.Is(la.Err(), dlock.ErrClosed) {
		v.violated("a lease held at Close: want Done closed with ErrClosed, got Err %v", la.Err())
	}
	if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		v.violated("Release after Close: want ErrNotHeld, got %v", err)
	}
	// Close gave the lock up: another client gets it long before its 60s TTL.
	lb, err := b.Acquire(ctxFor(t, 20*time.Second), k)
	if err != nil {
		v.violated("the lock of a closed client was not freed: %v", err)
		return
	}
	release(t, lb)
}

func (s *suite) concurrentUse(t *testing.T, v *verdict) {
	const goroutines, rounds, keys = 64, 4, 4
	l := s.client(t)
	ks := make([]string, keys)
	res := make([]*Resource, keys)
	for i := range ks {
		ks[i] = key(t, fmt.Sprintf("concurrent%d", i))
		res[i] = NewResource(false)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("goroutine%d", g)
			for r := range rounds {
				i := (g + r) % keys
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				ls, err := l.Acquire(ctx, ks[i], dlock.WithTTL(30*time.Second))
				cancel()
				if err != nil {
					t.Errorf("%s: Acquire: %v", holder, err)
					return
				}
				res[i].Enter(holder, ls.Token())
				_ = ls.Key()
				_ = ls.Err()
				res[i].Leave(holder)
				if err := ls.Release(context.Background()); err != nil {
					t.Errorf("%s: Release: %v", holder, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, r := range res {
		for _, o := range r.Overlaps() {
			v.violated("one Locker shared by %d goroutines: %s", goroutines, o)
		}
	}
}

// doneAndErr: Done and Err of a lease through release, expiry and loss (as for
// every primitive), and through the loss of its lock to a deletion while it is held,
// with the cause the backend's declaration implies (spec.Capabilities.DeletionSeen).
func (s *suite) doneAndErr(t *testing.T, v *verdict) {
	s.primDoneAndErr(mutexFamily)(t, v)
	d, ok := s.h.(KeyDeleter)
	if !ok {
		return
	}
	k := key(t, "done-lost")
	switch s.caps.DeletionSeen {
	case spec.SeenByRefresh:
		if !s.caps.Refresh {
			return // nothing tells the holder, and it never refreshes: it cannot know
		}
		ttl := 2 * s.unit
		la := mustAcquire(t, s.client(t), k, dlock.WithTTL(ttl), dlock.WithAutoRenew())
		s.cr.rec.fault("key deleted behind its holder", func() { d.DeleteKey(t, k) })
		if _, ok := waitDone(t, la, 2*ttl+5*time.Second); !ok || !errors.Is(la.Err(), dlock.ErrLost) {
			v.violated("an auto-renewed lease whose lock was deleted: want Done closed with ErrLost, got %v", la.Err())
			return
		}
		wantCause(t, v, "an auto-renewed lease whose lock was deleted (seen by its next refresh)", la, dlock.CauseRefused)
	default:
		// The store tells the holder: the lease ends at once, long before a renewal
		// (the first comes at a third of a 30s TTL) could find the lock gone.
		var opts []dlock.Option
		if s.caps.PerLeaseTTL {
			opts = []dlock.Option{dlock.WithTTL(30 * time.Second), dlock.WithAutoRenew()}
		}
		want, how := dlock.CauseDeleted, "a watch on the lock"
		if s.caps.DeletionSeen == spec.SeenBySession {
			want, how = dlock.CauseSession, "the end of the session that held it"
		}
		la := mustAcquire(t, s.client(t), k, opts...)
		s.cr.rec.fault("key deleted behind its holder", func() { d.DeleteKey(t, k) })
		const within = 8 * time.Second
		if _, ok := waitDone(t, la, within); !ok || !errors.Is(la.Err(), dlock.ErrLost) {
			v.violated("a lease whose lock was deleted (seen by %s): want Done closed within %v with ErrLost, got %v", how, within, la.Err())
			if !ok {
				_ = la.Release(ctxFor(t, 10*time.Second))
			}
			return
		}
		wantCause(t, v, "a lease whose lock was deleted (seen by "+how+")", la, want)
	}
}

// wantCause records a violation unless the ended lease ls's Err is a
// *dlock.LossError with one of the causes want.
func wantCause(t testing.TB, v *verdict, what string, ls dlock.Lease, want ...dlock.Cause) {
	t.Helper()
	var le *dlock.LossError
	if !errors.As(ls.Err(), &le) {
		v.violated("%s: want a *dlock.LossError with cause %v, got Err %v", what, causeList(want), ls.Err())
		return
	}
	if !slices.Contains(want, le.Cause) {
		v.violated("%s: want cause %v, got %q (Err %v)", what, causeList(want), le.Cause, ls.Err())
		return
	}
	t.Logf("%s: cause %q (Err %v)", what, le.Cause, ls.Err())
}

// causeList names causes for messages ("expired or unreachable").
func causeList(cs []dlock.Cause) string { return strings.Join(causeNames(cs...), " or ") }

// causeNames are the names of causes as Event.Cause records them.
func causeNames(cs ...dlock.Cause) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.String())
	}
	return names
}

// fifo lines waiters up one at a time (each seen in the store's queue before the
// next comes), then releases: they must be granted in that order, a TryAcquire
// right after the release must fail, and the holder that asks again at once must
// come last. (That a cancelled waiter leaves the queue is Cancellation's to check:
// cancelledWaitLeavesNothing, with its trials, where a backend that gets it wrong
// only when the cancel meets its enqueue request in flight declares so.)
func (s *suite) fifo(t *testing.T, v *verdict) {
	if !s.caps.FIFO {
		t.Skip("no queue: a waiter may be overtaken by a later one")
	}
	qi, ok := s.h.(QueueInspector)
	if !ok {
		t.Skip("FIFO is declared, but this harness cannot see the store's queue (no QueueInspector): not checked here")
	}
	k := key(t, "fifo")
	waitFor := func(n int) bool {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for qi.Waiting(t, k) != n {
			if time.Now().After(deadline) {
				v.violated("%d Acquires wait in the store's queue, want %d", qi.Waiting(t, k), n)
				return false
			}
			time.Sleep(2 * time.Millisecond) // the queue is the store's: nothing signals a change
		}
		return true
	}
	holder := s.client(t)
	ttl := dlock.WithTTL(time.Minute)
	ls := mustAcquire(t, holder, k, ttl)

	const n = 4
	type grant struct {
		who string
		err error
	}
	grants := make(chan grant, n+1)
	acquire := func(l dlock.Locker, who string) {
		ls, err := l.Acquire(ctxFor(t, time.Minute), k, ttl)
		if err != nil {
			grants <- grant{who, err}
			return
		}
		grants <- grant{who, nil} // while holding: the channel has the grants in order
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			grants <- grant{who, fmt.Errorf("release: %w", err)}
		}
	}
	var want []string
	for i := range n {
		who := fmt.Sprintf("waiter%d", i)
		go acquire(s.client(t), who)
		want = append(want, who)
		if !waitFor(i + 1) {
			break
		}
	}
	release(t, ls)
	if lt, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, ttl); err == nil {
		// Fair only if every waiter has had its turn: each reports its grant while
		// it holds the lock, so a free lock means the reports are in.
		if had := len(grants); had < len(want) {
			v.violated("TryAcquire right after the release was granted (token %d) with %d of %d waiters not yet served",
				lt.Token(), len(want)-had, len(want))
		}
		release(t, lt)
	}
	go acquire(holder, "the holder, asking again")
	want = append(want, "the holder, asking again")
	var got []string
	for range want {
		g := <-grants
		if g.err != nil {
			t.Fatalf("%s: %v", g.who, g.err)
		}
		got = append(got, g.who)
	}
	if !slices.Equal(got, want) {
		v.violated("granted in the order %v, want the order of arrival %v", got, want)
	}
}
