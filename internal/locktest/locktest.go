// Package locktest holds small checks the backends' own tests share.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// MutuallyExclusive runs 4 goroutines on each of a and b (two clients of one
// backend, e.g. in two modes), each taking key 25 times and holding it for a
// millisecond of work, and fails t if two are ever inside at once.
func MutuallyExclusive(t *testing.T, key string, a, b dlock.Locker) {
	t.Helper()
	var inside, grants atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for range 25 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				ls, err := l.Acquire(ctx, key, dlock.WithTTL(10*time.Second))
				cancel()
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders inside at once", n)
				}
				grants.Add(1)
				time.Sleep(time.Millisecond) // the critical section's work
				inside.Add(-1)
				ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				err = ls.Release(ctx)
				cancel()
				if err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d grants, none overlapping", grants.Load())
}

// Staller is a link between a client and its store that can hold every byte back
// (servers.Proxy).
type Staller interface {
	Stall()
	WaitStalled(d time.Duration) bool
	Restore()
}

// stallOnCheck stalls link and waits, up to within, until a check's bytes are held
// on it; it fails t (the link restored) if none comes.
func stallOnCheck(t *testing.T, link Staller, within time.Duration) {
	t.Helper()
	link.Stall()
	if !link.WaitStalled(within) {
		link.Restore()
		t.Fatal("no check reached the stalled link")
	}
}

// SlowAnswerIsNotALoss: ls is a lease whose client checks its connection every
// check, through link, on a server that keeps a silent session far longer than five
// checks. With the link stalled once a check is on it, for five check intervals (the
// check's answer is that late), the lease is still held afterwards and releases
// normally: a late answer is not taken for a loss.
func SlowAnswerIsNotALoss(t *testing.T, ls dlock.Lease, link Staller, check time.Duration) {
	t.Helper()
	stallOnCheck(t, link, 10*check)
	defer link.Restore()
	time.Sleep(5 * check) // the fault: the check's answer is this late
	link.Restore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release after a late answer: %v (Err %v)", err, ls.Err())
	}
}

// ReleaseHonoursCtx: ls is a lease whose client checks its connection every check,
// through link. With the link stalled once a check is on it, a Release with a 200ms
// context returns that context's error well within the check interval (it does not
// wait for the check), the lease is as it was, and it is released once the link
// delivers again.
func ReleaseHonoursCtx(t *testing.T, ls dlock.Lease, link Staller, check time.Duration) {
	t.Helper()
	stallOnCheck(t, link, 2*check)
	defer link.Restore()
	const bound = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	t0 := time.Now()
	err := ls.Release(ctx)
	took := time.Since(t0)
	if took >= check/2 {
		t.Fatalf("Release with a %v context returned after %v (%v), waiting for the check (interval %v)", bound, took, err, check)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release while a check holds the connection: %v, want the context's error", err)
	}
	t.Logf("Release returned %v after %v", err, took.Round(time.Millisecond))
	link.Restore() // the check's ping is answered: the lease is still held
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release once the link delivers again: %v", err)
	}
}

// TryAcquire takes key on l with TryAcquire and fails t unless it is granted.
func TryAcquire(t testing.TB, l dlock.Locker, key string, opts ...dlock.Option) dlock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls, err := l.TryAcquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return ls
}

// WantHeld checks that key is held by someone else: a TryAcquire on l must fail
// with dlock.ErrNotAcquired (what names the moment in the failure). A lease it is
// granted all the same is released again.
func WantHeld(t testing.TB, l dlock.Locker, key, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls, err := l.TryAcquire(ctx, key, dlock.WithTTL(time.Minute))
	if err == nil {
		t.Errorf("%s: TryAcquire(%q) was granted (token %d); want ErrNotAcquired", what, key, ls.Token())
		_ = ls.Release(ctx)
		return
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire(%q): want ErrNotAcquired, got %v", what, key, err)
	}
}

// Release releases ls and fails t if that fails.
func Release(t testing.TB, ls dlock.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release(%q): %v", ls.Key(), err)
	}
}

// ServerClockExpiry checks that a backend whose expiry runs on the store's clock
// ignores a client's own sense of time: skewed is a client whose session sees a
// different "now" (a time zone, a skewed clock; skew says how, for the failures),
// normal an ordinary one. A lock normal holds for a minute is held for skewed; a
// lock skewed takes for 500ms is held for normal, and free for it only after those
// 500ms, and skewed's Release then finds it gone (dlock.ErrNotHeld). Keys start
// with prefix.
func ServerClockExpiry(t *testing.T, normal, skewed dlock.Locker, prefix, skew string) {
	t.Helper()
	ln := TryAcquire(t, normal, prefix+"/live", dlock.WithTTL(time.Minute))
	WantHeld(t, skewed, prefix+"/live", "a client "+skew+", on a lock with a minute left")
	Release(t, ln)

	const ttl = 500 * time.Millisecond
	t0 := time.Now()
	ls := TryAcquire(t, skewed, prefix+"/own", dlock.WithTTL(ttl))
	WantHeld(t, normal, prefix+"/own", "a lock just taken by the client "+skew)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := normal.Acquire(ctx, prefix+"/own", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("the skewed client's lock (ttl %v) was not free after 10s: %v", ttl, err)
	}
	if took := time.Since(t0); took < ttl-2*time.Millisecond {
		t.Errorf("the skewed client's lock was taken over after %v, before its ttl %v", took, ttl)
	}
	Release(t, ln)
	if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the expired lease: want ErrNotHeld, got %v", err)
	}
}

// WantCause checks that the ended lease l says it was lost for cause.
func WantCause(t testing.TB, l dlock.Lease, cause dlock.Cause) {
	t.Helper()
	var le *dlock.LossError
	if !errors.As(l.Err(), &le) || le.Cause != cause {
		t.Errorf("Err: want a loss with cause %v, got %v", cause, l.Err())
	}
}

// SessionLockDiesWithServer checks a lock that lives as long as its connection
// across a crash of its server: a's lease on key ends as kill makes the server die —
// before restart brings it back, within 10s, without a's check interval (noCheck,
// which a must have been opened with) — with ErrLost for cause dlock.CauseSession;
// once restart returns, b takes key, and a's Release finds it gone
// (dlock.ErrNotHeld).
func SessionLockDiesWithServer(t *testing.T, a, b dlock.Locker, key string, noCheck time.Duration, kill, restart func() error) {
	t.Helper()
	la := TryAcquire(t, a, key)
	if err := kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the holder's lease did not end within 10s of the server's death (check interval %v)", noCheck)
	}
	if err := restart(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(la.Err(), dlock.ErrLost) {
		t.Errorf("Err of the lease after the restart: want ErrLost, got %v", la.Err())
	}
	WantCause(t, la, dlock.CauseSession)
	Release(t, TryAcquire(t, b, key))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Release of the lost lease: want ErrNotHeld, got %v", err)
	}
}

// Ctx returns a context that ends after d or when t ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// RefreshCycle takes key on l (TryAcquire, TTL a minute), refreshes the lease once
// and releases it; it fails t if any step fails.
func RefreshCycle(t testing.TB, l dlock.Locker, key string) {
	t.Helper()
	ls := TryAcquire(t, l, key, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ls.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	Release(t, ls)
}

// RWWaitLongerThanTTL checks that a read-write lock's waiter may wait longer than
// its own TTL (a reader behind a writer, a writer behind a reader): its lease's TTL
// starts with the attempt that granted it, not with the wait, so the grant is good.
// open returns a new client's read-write lock on key.
func RWWaitLongerThanTTL(t *testing.T, open func(t *testing.T, key string) *dlock.RWMutex) {
	ctx := Ctx(t, 30*time.Second)
	for _, c := range []struct {
		name        string
		holdShared  bool
		waitsShared bool
	}{{"reader behind a writer", false, true}, {"writer behind a reader", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			k := fmt.Sprintf("rw-long-wait/%s/%d", strings.ReplaceAll(c.name, " ", "-"), time.Now().UnixNano())
			holder, waiter := open(t, k), open(t, k)
			take := func(m *dlock.RWMutex, shared bool, opts ...dlock.Option) (dlock.Lease, error) {
				if shared {
					return m.AcquireShared(ctx, opts...)
				}
				return m.Acquire(ctx, opts...)
			}
			held, err := take(holder, c.holdShared, dlock.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const ttl = 200 * time.Millisecond
			got := make(chan error, 1)
			go func() {
				ls, err := take(waiter, c.waitsShared, dlock.WithTTL(ttl))
				if err == nil {
					err = ls.Release(ctx)
				}
				got <- err
			}()
			select {
			case err := <-got:
				t.Fatalf("the waiter returned while the key was held: %v", err)
			case <-time.After(3 * ttl): // the wait must outlast the waiter's TTL
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("a waiter granted after waiting longer than its TTL: %v", err)
			}
		})
	}
}
