package dlocktest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Event is one entry of a Store's History.
type Event struct {
	// At is when it happened (a call: when it began), from NewStore: the bubble's
	// fake clock inside a testing/synctest bubble.
	At time.Duration
	// Took is how long a call took (zero for the rest).
	Took time.Duration
	// Client names the client; empty for a fault on the whole store.
	Client string
	// What says what it is:
	//   - a Client's call: "Acquire", "TryAcquire", "Close";
	//   - what reached the store from a client's Locker (any primitive's):
	//     "store: acquire", "store: wait", "store: refresh", "store: release",
	//     "store: leader";
	//   - "Done": a lease ended (Err says why);
	//   - "fault: …": a fault injected by the test (Note says what);
	//   - "write <resource>": a write to a Resource (Err: refused).
	What  string
	Key   string
	Token uint64 // the lease's (or the lock's) fencing token
	// Err is the call's error, the lease's Err for "Done", a refused write's reason.
	Err string
	// Note says which fault hit a call that reached the store, or what a fault was.
	Note string
}

// String formats e on one line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%10s", e.At.Round(time.Microsecond))
	if e.Client != "" {
		fmt.Fprintf(&b, " %s:", e.Client)
	}
	fmt.Fprintf(&b, " %s", e.What)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	if e.Token != 0 {
		fmt.Fprintf(&b, " token %d", e.Token)
	}
	if e.Took != 0 {
		fmt.Fprintf(&b, " (took %v)", e.Took.Round(time.Microsecond))
	}
	if e.Note != "" {
		fmt.Fprintf(&b, " [%s]", e.Note)
	}
	if e.Err != "" {
		fmt.Fprintf(&b, ": %s", e.Err)
	}
	return b.String()
}

// History is a Store's record, in the order it was made.
type History []Event

// String formats h one event a line.
func (h History) String() string {
	var b strings.Builder
	for _, e := range h {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// History returns what happened so far: each client's calls, what reached the
// store and what it answered, the faults, the ends of leases and the writes to
// Resources, by the time they happened (a call: when it began); what happened at
// one moment is in the order it was recorded (a call when it returned). The ends of leases of semaphores, read-write locks, elections and
// AcquireAll are recorded once the lease has passed through a Resource or a fault
// (Client.Acquire's and TryAcquire's always).
func (s *Store) History() History {
	s.mu.Lock()
	h := append(History(nil), s.history...)
	s.mu.Unlock()
	slices.SortStableFunc(h, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
	return h
}

// breach records a promise of dlock.New's lease core to its driver broken (a
// driver closed with calls in flight, a call after the driver's Close), for the
// simulation's checks.
func (s *Store) breach(what string) {
	s.mu.Lock()
	s.breaches = append(s.breaches, what)
	s.mu.Unlock()
}

// record appends e to the History.
func (s *Store) record(e Event) {
	s.mu.Lock()
	s.history = append(s.history, e)
	s.mu.Unlock()
}
