package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
)

// Regressions: defects of the lease core the simulation found, each named by the
// seed that found it, replayed here as a plain scenario.

// inBubble runs f in a synctest bubble and fails t if goroutines of the bubble
// are left when f returns (synctest.Test then panics: recovered and reported).
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("synctest: %v", p)
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		f(t)
		synctest.Wait()
		if n, dump := bubbleGoroutines(); n > 0 {
			t.Errorf("%d goroutines left:\n%s", n, dump)
		}
	})
}

// Seed 1: a set whose grants arrived after its validity was given back, one key
// of it already expired on the store; the give-back found that key not ours, and
// the set's watches of its keys were never stopped — two goroutines left behind
// for good (locker.giveBack now stops them).
func TestSetGivenBackStopsWatching(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := NewStore()
		c := s.Client("c")
		c.DelayGrants(700 * time.Millisecond)
		_, err := dlock.AcquireAll(t.Context(), c, []string{"a", "b"}, dlock.WithTTL(time.Second), dlock.WithRetry(dlock.NoRetry()))
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("AcquireAll with each grant 700ms late and a TTL of 1s: %v, want ErrNotAcquired", err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
}

// Seed 22: a Release whose answer came after the lease's validity deadline
// returned nil while the lease's Err said it was lost: Release now returns
// ErrNotHeld with the lease's reason, as Refresh does.
func TestReleaseAnsweredAfterDeadline(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := NewStore()
		defer s.Close()
		s.schedule = func(c *Client, call, key string, token uint64) fate {
			if call == "store: release" {
				return fate{delay: 2 * time.Second, note: "reply 2s late"}
			}
			return fate{}
		}
		ls, err := s.Client("c").Acquire(t.Context(), "k", dlock.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		err = ls.Release(t.Context())
		if !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrExpired) {
			t.Errorf("Release answered after the deadline: %v, want ErrNotHeld (ErrExpired)", err)
		}
		if !errors.Is(ls.Err(), dlock.ErrExpired) {
			t.Errorf("Err: %v, want ErrExpired", ls.Err())
		}
	})
}

// Seeds 37 (a mutex) and 123 (a set): a Release whose answer was lost had freed
// the lock; the next automatic renewal found it gone and ended the lease as lost
// (CauseRefused). The renewal now asks the store again, whose release is
// idempotent for its owner, and the lease ends released.
func TestRenewalAfterUnansweredRelease(t *testing.T) {
	for _, set := range []bool{false, true} {
		t.Run(fmt.Sprintf("set=%v", set), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := NewStore()
				defer s.Close()
				c := s.Client("c")
				opts := []dlock.Option{dlock.WithTTL(3 * time.Second), dlock.WithAutoRenew()}
				var ls dlock.Lease
				var err error
				if set {
					ls, err = dlock.AcquireAll(t.Context(), c, []string{"a", "b"}, opts...)
				} else {
					ls, err = c.Acquire(t.Context(), "a", opts...)
				}
				if err != nil {
					t.Fatal(err)
				}
				c.LoseReplies(1)
				if err := ls.Release(t.Context()); !errors.Is(err, ErrFault) {
					t.Fatalf("Release with its reply lost: %v, want ErrFault", err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				select {
				case <-ls.Done():
				case <-ctx.Done():
					t.Fatal("the lease did not end after its renewal found the lock released")
				}
				if !errors.Is(ls.Err(), dlock.ErrReleased) {
					t.Errorf("Err: %v, want ErrReleased (the owner's release went through)", ls.Err())
				}
			})
		})
	}
}

// Seed 5405: Close released a lease's lock on the store before it ended the
// lease; the release's answer came late, and meanwhile another client was granted
// the lock while the closing client's lease still looked valid (Done open). Close
// now ends the lease first.
func TestCloseEndsLeaseBeforeReleasing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := NewStore()
		defer s.Close()
		a, b := s.Client("a"), s.Client("b")
		s.schedule = func(c *Client, call, key string, token uint64) fate {
			if c == a && call == "store: release" {
				return fate{delay: 2 * time.Second, note: "reply 2s late"}
			}
			return fate{}
		}
		held, err := a.Acquire(t.Context(), "k", dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error)
		go func() { closed <- a.Close() }()
		defer func() { <-closed }()
		lb, err := b.Acquire(t.Context(), "k", dlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
		default:
			t.Errorf("b holds %q (token %d) while a's lease (token %d) is valid: Close released it before ending it", "k", lb.Token(), held.Token())
		}
	})
}

// Seed 14883: an auto-renewed lease lost (its store said so) while a renewal
// hung: the renewal went on after the lease had ended, past the client's Close,
// which closed the driver under it and returned with its goroutine still
// running. A lease's end now cancels its renewal in flight.
func TestLossCancelsRenewalInFlight(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := NewStore()
		s.schedule = func(c *Client, call, key string, token uint64) fate {
			if call == "store: refresh" {
				return fate{hang: true, note: "no answer"}
			}
			return fate{}
		}
		c := s.Client("c")
		ls, err := c.Acquire(t.Context(), "k", dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond) // the first renewal (at 1s) hangs
		if err := s.Lose(ls, dlock.CauseDeleted); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n, dump := bubbleGoroutines(); n > 0 {
			t.Errorf("%d goroutines left after Close returned:\n%s", n, dump)
		}
		for _, b := range s.breaches {
			t.Error(b)
		}
		s.Close()
	})
}
