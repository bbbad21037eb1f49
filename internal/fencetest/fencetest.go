// Package fencetest holds what the tests of the fencing guards (package fence and
// its store packages) share: the paused holder's story told against a guard on real
// locks (LateWrite), concurrent writers (Concurrent), and the guards on real servers
// that the backends' fault tests put in front of the suite's resource (Guards).
package fencetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fence"
)

// Write is a guarded write of value to resource with a grant's token and writer.
type Write func(ctx context.Context, resource string, token uint64, writer, value string) error

// Read returns what resource holds now.
type Read func(ctx context.Context, resource string) string

// Ctx returns a context that ends after d or with t.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// LateWrite tells the paused holder's story on real locks, with resource named key:
// a is granted key (TTL ttl, no renewal) and writes "a1"; its holder stalls — it
// stops renewing, as a paused process does — until its lease has ended (Done); b is
// granted key, with a larger token, and writes "b"; then a writes "a2", late. It
// fails t unless a's first write and b's were accepted, a's late write was refused
// with a *fence.StaleError (BelowFence, the fence b's token), and read finds "b".
func LateWrite(t *testing.T, a, b dlock.Locker, key string, ttl time.Duration, write Write, read Read) {
	t.Helper()
	la, err := a.Acquire(Ctx(t, 30*time.Second), key, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	wa := fence.NewWriter()
	if err := write(Ctx(t, 10*time.Second), key, la.Token(), wa, "a1"); err != nil {
		t.Fatalf("the holder's write (token %d): %v", la.Token(), err)
	}
	<-la.Done() // the pause: a's lease ends while it does not look
	lb, err := b.Acquire(Ctx(t, ttl+30*time.Second), key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Release(Ctx(t, 10*time.Second))
	if lb.Token() <= la.Token() {
		t.Fatalf("the second grant's token %d is not above the first's %d", lb.Token(), la.Token())
	}
	if err := write(Ctx(t, 10*time.Second), key, lb.Token(), fence.NewWriter(), "b"); err != nil {
		t.Fatalf("the new holder's write (token %d): %v", lb.Token(), err)
	}
	err = write(Ctx(t, 10*time.Second), key, la.Token(), wa, "a2")
	var stale *fence.StaleError
	switch {
	case err == nil:
		t.Fatalf("the paused holder's late write (token %d, after token %d wrote) was accepted", la.Token(), lb.Token())
	case !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale):
		t.Fatalf("the paused holder's late write: want a *fence.StaleError, got %v", err)
	case stale.Reason != fence.BelowFence || stale.Fence != lb.Token() || stale.Token != la.Token() || stale.Resource != key:
		t.Fatalf("the refusal says %+v, want token %d below fence %d of %q", *stale, la.Token(), lb.Token(), key)
	}
	t.Logf("late write refused: %v", err)
	if got := read(Ctx(t, 10*time.Second), key); got != "b" {
		t.Fatalf("the resource holds %q, want the new holder's %q", got, "b")
	}
}

// Concurrent lets n writers, each with a token of its own (1..n, in random order),
// write their token to resource at once, twice each. Token n is the largest: it is
// accepted, and whatever else was accepted, the resource must end holding "n" —
// a guard whose check and write are not one step lets an older write land last. It
// also checks that every failure of a smaller token is ErrStale, and that the
// writer of token n, the largest, wrote both times.
func Concurrent(t *testing.T, resource string, n int, write Write, read Read) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	start := make(chan struct{})
	for _, tok := range rand.Perm(n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			token, writer := uint64(tok+1), fence.NewWriter()
			for i := range 2 {
				err := write(Ctx(t, time.Minute), resource, token, writer, strconv.FormatUint(token, 10))
				switch {
				case err == nil:
				case errors.Is(err, fence.ErrStale) && token < uint64(n):
					return // a larger token wrote first
				default:
					errs <- fmt.Errorf("token %d of %d, write %d: %w", token, n, i+1, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := read(Ctx(t, 10*time.Second), resource); got != strconv.Itoa(n) {
		t.Fatalf("after %d concurrent writers the resource holds %q, want the largest token's %q", n, got, strconv.Itoa(n))
	}
}
