package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// semLimit is the limit of the semaphores the shared checks use.
const semLimit = 2

func newSemaphore(t testing.TB, l dlock.Locker, k string, limit int) *recSemaphore {
	t.Helper()
	sem, err := dlock.NewSemaphore(l, k, limit)
	if err != nil {
		t.Fatalf("NewSemaphore(%q, %d) on a backend that declares semaphores: %v", k, limit, err)
	}
	return &recSemaphore{sem, recorded(l, sem, Event{Key: k, Kind: "permit", Limit: limit})}
}

// semHandle is a semaphore of l as a (recorded) handle.
func semHandle(t testing.TB, l dlock.Locker, k string, limit int) handle {
	return newSemaphore(t, l, k, limit)
}

// semaphoreFamily: a contender asks for one permit of a limit-2 semaphore; filling
// takes both.
var semaphoreFamily = family{
	name:      "semaphore",
	contender: func(t testing.TB, l dlock.Locker, k string) handle { return semHandle(t, l, k, semLimit) },
	fill: func(t testing.TB, l dlock.Locker, k string, opts ...dlock.Option) ([]dlock.Lease, error) {
		sem := semHandle(t, l, k, semLimit)
		return tryAll(t, []handle{sem, sem}, opts...)
	},
}

// semaphores checks spec.SemaphoreProperties on a backend that declares semaphores.
func (s *suite) semaphores(t *testing.T) {
	d := s.caps.Semaphore
	if d == nil {
		return
	}
	f := semaphoreFamily
	checks := map[spec.Property]func(*testing.T, *verdict){
		spec.SemaphoreBound:         s.semaphoreBound,
		spec.SemaphorePermitReturns: s.primReturns(f),
		spec.SemaphoreConflict:      s.semaphoreConflict,
		spec.SemaphoreFencing:       s.primFencing(f, d.Fencing, nil),
		spec.SemaphoreCancellation:  s.primCancellation(f),
		spec.SemaphoreClose:         s.primClose(f),
		spec.SemaphoreDoneAndErr:    s.primDoneAndErr(f),
	}
	for _, p := range spec.SemaphoreProperties {
		s.property(t, p, checks[p])
	}
}

// semaphoreBound: limit clients are granted a permit at once (TryAcquire, while
// every one of them holds), one more is refused; then many clients contend and the
// resource never sees more than limit holders inside.
func (s *suite) semaphoreBound(t *testing.T, v *verdict) {
	const limit = 3
	k := key(t, "sem-bound")
	g := newGauge(limit)
	var held []dlock.Lease
	for i := range limit {
		ls, err := newSemaphore(t, s.client(t), k, limit).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
		if err != nil {
			v.violated("permit %d of %d refused while %d were held: %v", i+1, limit, i, err)
			break
		}
		g.enter(fmt.Sprintf("holder%d", i), false)
		held = append(held, ls)
	}
	if _, peak := g.report(); peak < limit {
		v.violated("only %d holders of a limit-%d semaphore were reached at once", peak, limit)
	}
	if ls, err := newSemaphore(t, s.client(t), k, limit).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second)); err == nil {
		v.violated("permit %d of a limit-%d semaphore was granted (token %d)", limit+1, limit, ls.Token())
		_ = ls.Release(ctxFor(t, 10*time.Second))
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore: want ErrNotAcquired, got %v", err)
	}
	releaseAll(t, held)

	g = newGauge(limit)
	s.contend(t, g, 8, 6, func(c, r int, l dlock.Locker) (handle, bool) { return newSemaphore(t, l, k, limit), false })
	overs, peak := g.report()
	for _, o := range overs {
		v.violated("%s", o)
	}
	t.Logf("8 clients contending for %d permits: at most %d inside at once", limit, peak)
}

// semaphoreConflict: while a semaphore has holders, another limit is refused with
// ErrConflict (at once, not after a wait), and so is the key's read-write lock;
// once no holder is left, a new limit is taken.
func (s *suite) semaphoreConflict(t *testing.T, v *verdict) {
	a, b := s.client(t), s.client(t)
	k := key(t, "sem-conflict")
	ls, err := newSemaphore(t, a, k, semLimit).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire on a free semaphore: %v", err)
	}
	other := newSemaphore(t, b, k, semLimit+1)
	expectConflict(t, v, "TryAcquire with limit 3 while a limit-2 permit is held", other.TryAcquire)
	expectConflict(t, v, "Acquire with limit 3 while a limit-2 permit is held", other.Acquire)
	if s.caps.RWLock != nil {
		rw := newRWMutex(t, b, k)
		expectConflict(t, v, "TryAcquireShared of the read-write lock of a key held as a semaphore", rw.TryAcquireShared)
		expectConflict(t, v, "TryAcquire of the read-write lock of a key held as a semaphore", rw.TryAcquire)
	}
	release(t, ls)
	ls, err = other.TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	if err != nil {
		v.violated("a new limit once every permit of the old one was released: %v", err)
		return
	}
	release(t, ls)
}

// expectConflict calls acquire and records a violation unless it fails promptly
// with ErrConflict (a grant is released again).
func expectConflict(t testing.TB, v *verdict, what string, acquire func(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error)) {
	t.Helper()
	t0 := time.Now()
	ls, err := acquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	took := time.Since(t0)
	switch {
	case err == nil:
		v.violated("%s: granted (token %d), want ErrConflict", what, ls.Token())
		_ = ls.Release(ctxFor(t, 10*time.Second))
	case !errors.Is(err, dlock.ErrConflict):
		v.violated("%s: want ErrConflict, got %v", what, err)
	case took > 5*time.Second:
		v.violated("%s: ErrConflict came only after %v", what, took)
	}
}
