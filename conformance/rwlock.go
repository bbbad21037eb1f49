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

func newRWMutex(t testing.TB, l dlock.Locker, k string) *recRWMutex {
	t.Helper()
	m, err := dlock.NewRWMutex(l, k)
	if err != nil {
		t.Fatalf("NewRWMutex(%q) on a backend that declares read-write locks: %v", k, err)
	}
	return &recRWMutex{m, recorded(l, m, Event{Key: k, Kind: "exclusive"}), recorded(l, sharedSide{m}, Event{Key: k, Kind: "shared"})}
}

// shared is the shared side of a read-write lock as a handle.
type shared struct{ m *recRWMutex }

func (h shared) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.m.AcquireShared(ctx, opts...)
}

func (h shared) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.m.TryAcquireShared(ctx, opts...)
}

// rwHandle is a read-write lock of l as a (recorded) handle: its exclusive side, or
// its shared one.
func rwHandle(t testing.TB, l dlock.Locker, k string, exclusive bool) handle {
	m := newRWMutex(t, l, k)
	if exclusive {
		return m
	}
	return shared{m}
}

// rwFamily: a contender asks for a shared lease; filling takes the exclusive one.
var rwFamily = family{
	name:      "read-write lock",
	contender: func(t testing.TB, l dlock.Locker, k string) handle { return rwHandle(t, l, k, false) },
	fill: func(t testing.TB, l dlock.Locker, k string, opts ...dlock.Option) ([]dlock.Lease, error) {
		return tryAll(t, []handle{rwHandle(t, l, k, true)}, opts...)
	},
}

// rwLocks checks spec.RWLockProperties on a backend that declares read-write locks.
func (s *suite) rwLocks(t *testing.T) {
	d := s.caps.RWLock
	if d == nil {
		return
	}
	if d.WriterPreference == d.Weak(spec.WriterProgress) {
		t.Errorf("the read-write lock's declaration disagrees with itself: WriterPreference %v, WriterProgress declared a weakness %v (one is the other's negation)",
			d.WriterPreference, d.Weak(spec.WriterProgress))
	}
	f := rwFamily
	exclusive := func(t testing.TB, l dlock.Locker, k string) (dlock.Lease, error) {
		return newRWMutex(t, l, k).Acquire(ctxFor(t, 30*time.Second), dlock.WithTTL(30*time.Second))
	}
	checks := map[spec.Property]func(*testing.T, *verdict){
		spec.RWExclusion:    s.rwExclusion,
		spec.WriterProgress: s.writerProgress,
		spec.RWLeaseReturns: s.primReturns(f),
		spec.RWConflict:     s.rwConflict,
		spec.RWFencing:      s.primFencing(f, d.Fencing, exclusive),
		spec.RWCancellation: s.primCancellation(f),
		spec.RWClose:        s.primClose(f),
		spec.RWDoneAndErr:   s.primDoneAndErr(f),
	}
	for _, p := range spec.RWLockProperties {
		s.property(t, p, checks[p])
	}
}

// rwExclusion: four readers hold shared leases at once (the overlap is observed,
// not assumed), an exclusive acquirer is then refused, an exclusive holder keeps
// readers and writers out; then readers and writers contend and the resource
// never sees an exclusive holder with company.
func (s *suite) rwExclusion(t *testing.T, v *verdict) {
	const readers = 4
	k := key(t, "rw-exclusion")
	var held []dlock.Lease
	for i := range readers {
		ls, err := newRWMutex(t, s.client(t), k).TryAcquireShared(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
		if err != nil {
			v.violated("shared lease %d refused while %d shared leases (and nothing else) were held: %v", i+1, i, err)
			break
		}
		held = append(held, ls)
	}
	w, r := newRWMutex(t, s.client(t), k), newRWMutex(t, s.client(t), k)
	expectNotGranted(t, v, w.TryAcquire, fmt.Sprintf("exclusive TryAcquire while %d shared leases were held", len(held)))
	releaseAll(t, held)
	ls, err := w.TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("exclusive TryAcquire on a free read-write lock: %v", err)
	}
	expectNotGranted(t, v, r.TryAcquireShared, "shared TryAcquire while an exclusive lease was held")
	expectNotGranted(t, v, r.TryAcquire, "exclusive TryAcquire while an exclusive lease was held")
	release(t, ls)

	g := newGauge(0)
	s.contend(t, g, 6, 6, func(c, r int, l dlock.Locker) (handle, bool) {
		m := newRWMutex(t, l, k)
		if (c+r)%3 == 0 {
			return m, true
		}
		return shared{m}, false
	})
	overs, peak := g.report()
	for _, o := range overs {
		v.violated("%s", o)
	}
	t.Logf("6 clients, a third of the grants exclusive: at most %d inside at once", peak)
}

// expectNotGranted records a violation if try grants a lease (which it releases).
func expectNotGranted(t testing.TB, v *verdict, try func(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error), what string) {
	t.Helper()
	ls, err := try(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	switch {
	case err == nil:
		v.violated("%s: granted (token %d)", what, ls.Token())
		_ = ls.Release(ctxFor(t, 10*time.Second))
	case !errors.Is(err, dlock.ErrNotAcquired):
		t.Fatalf("%s: want ErrNotAcquired, got %v", what, err)
	}
}

// writerProgress: readers keep the lock read without a gap — each takes its next
// shared lease (TryAcquireShared) before it releases the one it holds, and only if
// that is refused releases first and waits (AcquireShared). An exclusive acquirer
// that comes meanwhile must get in within a bound: with writer preference the
// refused readers drain and it goes first; without, the readers' stream never
// leaves it a gap.
func (s *suite) writerProgress(t *testing.T, v *verdict) {
	const readers = 3
	const hold = 50 * time.Millisecond
	bound := 3*time.Second + 10*hold
	k := key(t, "rw-writer")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	reading := make(chan error, readers)
	g := newGauge(0)
	for i := range readers {
		h := shared{newRWMutex(t, s.client(t), k)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("reader%d", i)
			var cur dlock.Lease
			defer func() {
				if cur != nil {
					g.leave(name)
					_ = cur.Release(context.Background())
				}
			}()
			for n := 0; ctx.Err() == nil; n++ {
				next, err := h.TryAcquire(ctx, dlock.WithTTL(30*time.Second))
				if err != nil && cur != nil { // refused: let go first, then wait
					g.leave(name)
					_ = cur.Release(context.Background())
					cur = nil
				}
				if err != nil && !errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil {
					if n == 0 {
						reading <- fmt.Errorf("%s: TryAcquireShared: %w", name, err)
					}
					return
				}
				if err != nil {
					if next, err = h.Acquire(ctx, dlock.WithTTL(30*time.Second)); err != nil {
						if n == 0 && ctx.Err() == nil {
							reading <- fmt.Errorf("%s: AcquireShared: %w", name, err)
						}
						return // stopped, or the error was reported
					}
				}
				g.enter(name, false)
				if cur != nil {
					_ = cur.Release(context.Background())
				}
				cur = next
				if n == 0 {
					reading <- nil
				}
				select {
				case <-ctx.Done():
				case <-time.After(hold): // the reader's work: the stream's rhythm
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	for range readers {
		if err := <-reading; err != nil {
			t.Fatalf("a reader could not start its stream: %v", err)
		}
	}
	w := newRWMutex(t, s.client(t), k)
	t0 := time.Now()
	ls, err := w.Acquire(ctxFor(t, bound), dlock.WithTTL(30*time.Second))
	waited := time.Since(t0)
	if err != nil {
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("exclusive Acquire under a stream of readers: %v", err)
		}
		v.violated("an exclusive acquirer waited %v under a stream of %d overlapping readers and was not granted", waited.Round(time.Millisecond), readers)
		return
	}
	g.enter("writer", true)
	g.leave("writer")
	release(t, ls)
	stop()
	wg.Wait()
	overs, _ := g.report()
	for _, o := range overs {
		v.violated("%s", o)
	}
	t.Logf("the exclusive acquirer got in after %v under %d readers holding %v each", waited.Round(time.Millisecond), readers, hold)
}

// rwConflict: while a key is held as a semaphore, its read-write lock is refused
// with ErrConflict (at once); once the permits are released it is granted.
func (s *suite) rwConflict(t *testing.T, v *verdict) {
	if s.caps.Semaphore == nil {
		t.Skip("the backend has no semaphores: nothing to conflict with")
	}
	a, b := s.client(t), s.client(t)
	k := key(t, "rw-conflict")
	ls, err := newSemaphore(t, a, k, semLimit).TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire on a free semaphore: %v", err)
	}
	m := newRWMutex(t, b, k)
	expectConflict(t, v, "exclusive Acquire of a key held as a semaphore", m.Acquire)
	expectConflict(t, v, "shared Acquire of a key held as a semaphore", m.AcquireShared)
	release(t, ls)
	lr, err := m.TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(30*time.Second))
	if err != nil {
		v.violated("the read-write lock of a key whose semaphore permits were all released: %v", err)
		return
	}
	release(t, lr)
}
