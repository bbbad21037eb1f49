package mysqllock

import (
	"testing"
	"time"
)

// TestPacer: a queued waiter looks again after about half the time the waiters ahead
// should take, as learnt from how fast the queue moved: so the waiter next in line
// is never asleep for long when hand-offs are fast (a backoff by place alone slept
// through its turn: 2ms·2^ahead), a stalled queue is looked at less and less often,
// and no pause leaves the bounds.
func TestPacer(t *testing.T) {
	t0 := time.Unix(0, 0)
	p := pacer{per: 2 * time.Millisecond}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	if got := p.next(6, at(0)); got != 6*time.Millisecond {
		t.Errorf("first look, 6 ahead: pause %v, want 6ms (half of 6 × the 2ms guess)", got)
	}
	// The queue moved 5 places in 5ms: 1ms a hand-off, so the next in line looks
	// again within a millisecond or so.
	if got := p.next(1, at(5)); got > 2*time.Millisecond {
		t.Errorf("next in line after fast hand-offs: pause %v, want at most 2ms", got)
	}
	// Nobody moves for a second (a long hold): looks grow further apart …
	prev := time.Duration(0)
	for ms := 100; ms <= 1000; ms += 300 {
		got := p.next(1, at(5+ms))
		if got < prev {
			t.Errorf("stalled queue at %dms: pause %v shrank from %v", ms, got, prev)
		}
		prev = got
	}
	// … but stay within the bound, so that a crashed waiter's deadline is noticed.
	if got := p.next(50, at(60_000)); got != maxQueuePause {
		t.Errorf("50 ahead of a slow queue: pause %v, want the bound %v", got, maxQueuePause)
	}
	if got := (&pacer{per: time.Microsecond}).next(1, at(0)); got != time.Millisecond {
		t.Errorf("fast queue: pause %v, want the floor 1ms", got)
	}
}
