package dlocktest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// Lose ends a lease with the cause production gives for each kind of loss, and
// the store frees the lock for the next client only once the lease has ended (at
// the TTL for an unreachable one).
func TestLoseCauses(t *testing.T) {
	for _, tc := range []struct {
		cause dlock.Cause
		auto  bool
		want  dlock.Cause
	}{
		{dlock.CauseDeleted, false, dlock.CauseDeleted},
		{dlock.CauseSession, true, dlock.CauseSession},
		{dlock.CauseExpired, false, dlock.CauseExpired},
		{dlock.CauseExpired, true, dlock.CauseUnreachable},
		{dlock.CauseUnreachable, false, dlock.CauseUnreachable},
	} {
		t.Run(tc.cause.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := dlocktest.NewStore()
				defer s.Close()
				opts := []dlock.Option{dlock.WithTTL(10 * time.Second)}
				if tc.auto {
					opts = append(opts, dlock.WithAutoRenew())
				}
				ls, err := s.Client("a").Acquire(t.Context(), "k", opts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Lose(ls, tc.cause); err != nil {
					t.Fatal(err)
				}
				var le *dlock.LossError
				if !errors.As(ls.Err(), &le) || le.Cause != tc.want {
					t.Errorf("Err after Lose(%v), auto-renew %v: %v, want cause %v", tc.cause, tc.auto, ls.Err(), tc.want)
				}
				start := time.Now()
				lb, err := s.Client("b").Acquire(t.Context(), "k", dlock.WithTTL(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if tc.cause == dlock.CauseUnreachable && took < 9*time.Second {
					t.Errorf("b was granted the lock %v after an unreachable loss; the store keeps it to its TTL", took)
				}
				if tc.cause != dlock.CauseUnreachable && took > 0 {
					t.Errorf("b waited %v for a lock the store freed", took)
				}
				lb.Release(t.Context())
			})
		})
	}
}

// A hung store makes calls wait until their context ends;
// FailRefreshes makes an auto-renewed lease end unreachable at its deadline.
func TestHangFailRefreshes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := dlocktest.NewStore()
		defer s.Close()
		a := s.Client("a")
		s.Hang()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		start := time.Now()
		if _, err := a.TryAcquire(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("TryAcquire on a hung store: %v, want DeadlineExceeded", err)
		}
		cancel()
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("TryAcquire on a hung store returned after %v, want its context's 2s", d)
		}
		s.Resume()
		ls, err := a.Acquire(t.Context(), "k", dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		a.FailRefreshes(1000)
		<-ls.Done()
		if d := time.Since(start) - 2*time.Second; d > 3*time.Second {
			t.Errorf("the lease ended %v after its grant, past its TTL", d)
		}
		if !errors.Is(ls.Err(), dlock.ErrLost) {
			t.Errorf("Err with every refresh failing: %v, want ErrLost (unreachable)", ls.Err())
		}
	})
}

// Check reports two holders whose writes interleaved.
func TestCheckOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := dlocktest.NewStore()
		defer s.Close()
		db := s.NewResource("db")
		la, _ := s.Client("a").Acquire(t.Context(), "x")
		lb, _ := s.Client("b").Acquire(t.Context(), "y") // another key: the lock does not protect db
		db.Write(la)
		db.Write(lb)
		db.Write(la)
		err := db.Check()
		if err == nil || !strings.Contains(err.Error(), "inside the critical section of a") {
			t.Errorf("Check after interleaved writes: %v", err)
		}
	})
}
