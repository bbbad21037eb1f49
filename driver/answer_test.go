package driver_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// TestSessionAnswerWait: a check waits for its answer until half the session
// timeout before the server may free the lock (idle/2 − interval), never less than
// an interval, and at most ten seconds (also where the server never ends a silent
// session). Whatever the wait, the lease ends at least an interval before the server
// may free the lock.
func TestSessionAnswerWait(t *testing.T) {
	for _, tc := range []struct{ interval, idle, want time.Duration }{
		{100 * time.Millisecond, 2 * time.Second, 900 * time.Millisecond},
		{time.Second, 3 * time.Second, time.Second}, // the interval is cut to a third of idle
		{time.Second, 30 * time.Second, 10 * time.Second},
		{time.Second, 8 * time.Hour, 10 * time.Second},
		{time.Second, 0, 10 * time.Second},
		{20 * time.Second, 0, 20 * time.Second},
	} {
		got := driver.SessionAnswerWait(tc.interval, tc.idle)
		if got != tc.want {
			t.Errorf("SessionAnswerWait(%v, %v) = %v, want %v", tc.interval, tc.idle, got, tc.want)
		}
		// The check starts an interval after the last answered one; the server frees
		// the lock idle after that answered one at the earliest.
		if tc.idle > 0 && tc.idle-(tc.interval+got) < tc.interval {
			t.Errorf("SessionAnswerWait(%v, %v) = %v: a check could give up less than an interval before the server freed the lock", tc.interval, tc.idle, got)
		}
	}
}
