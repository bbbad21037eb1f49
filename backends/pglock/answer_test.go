package pglock

import (
	"testing"
	"time"
)

// TestAnswerWait: a check waits for its answer until an interval before the server
// may free the lock (idle − 2×interval after the last answered check's interval),
// never less than an interval, and 10 s where the server never ends a silent session.
func TestAnswerWait(t *testing.T) {
	for _, tc := range []struct{ interval, idle, want time.Duration }{
		{100 * time.Millisecond, 2 * time.Second, 1800 * time.Millisecond},
		{time.Second, 30 * time.Second, 28 * time.Second},
		{time.Second, 3 * time.Second, time.Second}, // the interval is cut to a third of idle
		{time.Second, 0, 10 * time.Second},
		{20 * time.Second, 0, 20 * time.Second},
	} {
		got := answerWait(tc.interval, tc.idle)
		if got != tc.want {
			t.Errorf("answerWait(%v, %v) = %v, want %v", tc.interval, tc.idle, got, tc.want)
		}
		if tc.idle > 0 && tc.interval+got >= tc.idle {
			t.Errorf("answerWait(%v, %v) = %v: a check could give up after the server freed the lock", tc.interval, tc.idle, got)
		}
	}
}
