// Package locktest holds small checks the backends' own tests share.
package locktest

import (
	"context"
	"errors"
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

// ReleaseHonoursCtx: ls is a lease whose client checks its connection every check,
// through link. With the link stalled once a check is on it, a Release with a 200ms
// context returns that context's error well within the check interval (it does not
// wait for the check), the lease is as it was, and it is released once the link
// delivers again.
func ReleaseHonoursCtx(t *testing.T, ls dlock.Lease, link Staller, check time.Duration) {
	t.Helper()
	link.Stall()
	defer link.Restore()
	if !link.WaitStalled(2 * check) {
		t.Fatal("no check reached the stalled link")
	}
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
