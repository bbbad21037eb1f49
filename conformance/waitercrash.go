package conformance

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// waiterCrash: while a lock is held, a waiter in a child process queues for it, a
// second waiter queues behind it, the first waiter's process gets SIGKILL, and the
// holder releases. The second waiter must be granted within the bound a dead holder's
// lock gets (freeBound: the TTL, or the session timeout, plus slack): a dead waiter
// must not block the queue for longer than its own TTL. Where the harness can see the
// store's queue (a FIFO backend's QueueInspector) the two are seen queued in that
// order; elsewhere each is given a moment to start waiting.
func (f *faults) waiterCrash(t *testing.T, c *results.Cell) {
	c.Property = string(spec.DeadlockFreedom)
	url := f.h.(URLer).URL(t)
	qi, canSee := f.h.(QueueInspector)
	canSee = canSee && f.caps.FIFO
	a, b := f.client(t), f.client(t)
	ttl := f.leaseTTL()
	queued := func(k string, n int) {
		t.Helper()
		if !canSee {
			time.Sleep(300 * time.Millisecond) // no view of the queue: let the waiter reach the store
			return
		}
		for end := time.Now().Add(30 * time.Second); qi.Waiting(t, k) < n; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%d waiters in the store's queue after 30s, want %d", qi.Waiting(t, k), n)
			}
		}
	}
	var served []time.Duration
	for i := range f.trials {
		c.Trials++
		k := key(t, fmt.Sprintf("waiter-crash%d", i))
		la, err := a.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("trial %d: the holder: %v", i, err)
		}
		ch := startWaiter(t, url, k, ttl, "crashing-waiter")
		queued(k, 1)
		got := make(chan error, 1)
		go func() {
			ls, err := b.Acquire(ctxFor(t, f.freeBound(ttl)), k, dlock.WithTTL(ttl))
			if err == nil {
				err = ls.Release(ctxFor(t, 10*time.Second))
			}
			got <- err
		}()
		queued(k, 2)
		ch.signal(syscall.SIGKILL)
		killed := time.Now()
		if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatalf("trial %d: the holder's Release: %v", i, err)
		}
		if err := <-got; err != nil {
			c.Violation("trial %d: the waiter behind a crashed waiter was not served within %v (waiter TTL %v, session timeout %v): %v",
				i, f.freeBound(ttl), ttl, f.caps.SessionTimeout, err)
			continue
		}
		served = append(served, time.Since(killed))
	}
	if len(served) > 0 {
		c.Note("the waiter behind the crashed one was served %v after the SIGKILL (waiter TTL %v, session timeout %v)", served, ttl, f.caps.SessionTimeout)
	}
}
