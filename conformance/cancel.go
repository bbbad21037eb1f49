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

// cancelTrials is how many times the strict part of Cancellation cancels a wait and
// releases at once.
const cancelTrials = 40

// cancelTrialsWeak is how many trials a declared weakness may take to show.
const cancelTrialsWeak = 400

// cancelledWaitLeavesNothing: a waiter's Acquire is cancelled, the holder releases
// at once after it returned, and another client's TryAcquire right after must be
// granted: nothing the cancelled wait started (a request still pending on the
// server, a queue entry) may take the lock. Over cancelTrials trials, each cancel
// coming while the wait is in the store's queue where the harness can see it
// (QueueInspector), else after a delay that varies from trial to trial. For a declared
// weakness the trials go on until one shows it, up to cancelTrialsWeak.
func (s *suite) cancelledWaitLeavesNothing(t *testing.T, v *verdict, a, b, c dlock.Locker) {
	qi, canSee := s.h.(QueueInspector)
	if !s.caps.FIFO {
		canSee = false // only a FIFO declaration promises a queue the harness can count
	}
	trials := cancelTrials
	weak := s.caps.Weak(spec.Cancellation)
	if weak {
		trials = cancelTrialsWeak // until the violation shows
	}
	bad := 0
	for i := 0; i < trials && !(weak && len(v.list()) > 0); i++ {
		k := key(t, fmt.Sprintf("cancel-strict%d", i))
		la := mustAcquire(t, a, k, dlock.WithTTL(time.Minute))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, k, dlock.WithTTL(time.Minute))
			errc <- err
		}()
		if canSee {
			for end := time.Now().Add(10 * time.Second); qi.Waiting(t, k) < 1 && time.Now().Before(end); {
				time.Sleep(time.Millisecond) // the queue is the store's: nothing signals a change
			}
		} else {
			time.Sleep(time.Duration(5+i%8*5) * time.Millisecond) // let the wait reach the store
		}
		cancel()
		if err := <-errc; !errors.Is(err, dlock.ErrNotAcquired) {
			cancelRelease(t, la)
			t.Fatalf("trial %d: a cancelled Acquire: want ErrNotAcquired, got %v", i, err)
		}
		release(t, la)
		lc, err := c.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
		if err != nil {
			bad++
			v.violated("trial %d: the wait was cancelled and returned, the holder released, and TryAcquire right after found the key held: %v", i, err)
			continue
		}
		release(t, lc)
	}
	if bad > 0 {
		t.Logf("%d trials found the key taken by a cancelled wait", bad)
	}
}

func cancelRelease(t testing.TB, ls dlock.Lease) { _ = ls.Release(ctxFor(t, 10*time.Second)) }
