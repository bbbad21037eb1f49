package dlocktest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// ErrStale is what a fenced Resource's Write returns (wrapped) for a token it
// refuses: 0, or below the highest token it has accepted.
var ErrStale = errors.New("dlocktest: stale fencing token refused")

// Resource is the thing a lock protects, in a test: the code under test writes to
// it with the lease it holds, and Check says whether the lock did its job — no two
// holders' writes interleaved, and no holder wrote after its lease had ended.
// One holder at a time: a mutex's, an exclusive lease's, a leader's, a set's (not
// for the shared leases of a read-write lock, nor a semaphore's permits). Safe for
// concurrent use.
type Resource struct {
	s      *Store
	name   string
	fenced bool

	mu     sync.Mutex
	max    uint64 // the highest token accepted (fenced)
	writes []write
}

// write is one Write.
type write struct {
	at        time.Duration
	client    string
	key       string
	token     uint64
	refused   bool
	ended     bool // the lease's Done had closed
	endedAt   time.Duration
	endReason string
}

// NewResource returns a Resource named name (in the History and in Check's
// reports) that accepts every write.
func (s *Store) NewResource(name string) *Resource { return &Resource{s: s, name: name} }

// NewFencedResource returns a Resource named name that checks fencing tokens as
// a fenced storage service does (docs/fencing.md): it refuses token 0 and a token
// below the highest it has accepted, with ErrStale. Tokens are unique in a Store,
// so an equal token is the same grant's, and accepted.
func (s *Store) NewFencedResource(name string) *Resource {
	return &Resource{s: s, name: name, fenced: true}
}

// Write records a write by the holder of l, now. It returns an error wrapping
// ErrStale when the Resource is fenced and refuses l's token, and an error for a
// lease that is not one of the Store's. It does not check that l is valid: that
// is what Check reports (a write after l's Done closed).
func (r *Resource) Write(l dlock.Lease) error {
	lk := r.s.lockOf(l)
	if lk == nil {
		return fmt.Errorf("dlocktest: write to %s: %v is not a lease of this store", r.name, l)
	}
	r.s.watch(lk.c, l)
	w := write{at: r.s.since(time.Now()), client: lk.c.name, key: l.Key(), token: l.Token()}
	select {
	case <-l.Done():
		w.ended = true
		w.endedAt = r.s.since(endedAt(l))
		w.endReason = errString(l.Err())
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.fenced {
		if w.token == 0 || w.token < r.max {
			w.refused = true
			err = fmt.Errorf("%w: %s refused token %d of %s (highest accepted %d)", ErrStale, r.name, w.token, w.client, r.max)
		} else {
			r.max = w.token
		}
	}
	r.writes = append(r.writes, w)
	r.s.record(Event{At: w.at, Client: w.client, What: "write " + r.name, Key: w.key, Token: w.token, Err: errString(err)})
	return err
}

// Check returns nil when the lock did its job for the Resource, and otherwise an
// error that lists:
//
//   - holders whose writes interleaved: a write (accepted) by the holder of one
//     lease between two writes by the holder of another — their critical
//     sections overlapped;
//   - writes made after the writer's lease had ended (its Done closed), accepted
//     or refused — the code did not stop when its lease ended —, one entry per
//     lease: how many, the first and the last.
//
// Check sees only what went through Write: a critical section is seen through
// its writes, from a lease's first write to its last. A holder that writes once inside a section of another's, or whose
// writes a fenced Resource refused, did not overlap it in the Resource.
func (r *Resource) Check() error {
	r.mu.Lock()
	ws := slices.Clone(r.writes)
	r.mu.Unlock()
	var out []string
	// Writes after the end, one entry per lease: how many, the first and the last.
	type late struct {
		first, last write
		n, refused  int
	}
	lates := map[uint64]*late{}
	var order []uint64
	for _, w := range ws {
		if !w.ended {
			continue
		}
		l := lates[w.token]
		if l == nil {
			l = &late{first: w}
			lates[w.token] = l
			order = append(order, w.token)
		}
		l.last = w
		l.n++
		if w.refused {
			l.refused++
		}
	}
	for _, tok := range order {
		l := lates[tok]
		w := l.first
		what := fmt.Sprintf("wrote to %s at %v", r.name, w.at)
		if l.n > 1 {
			what = fmt.Sprintf("wrote to %s %d times from %v to %v", r.name, l.n, w.at, l.last.at)
		}
		if l.refused > 0 {
			what += fmt.Sprintf(" (%d refused)", l.refused)
		}
		out = append(out, fmt.Sprintf("%s %s with token %d after its lease of %q ended at %v (%s)",
			w.client, what, w.token, w.key, w.endedAt, w.endReason))
	}
	// Sections: each lease's accepted writes, from its first to its last.
	type section struct {
		client      string
		token       uint64
		first, last int // indices in ws
	}
	var secs []section
	at := map[uint64]int{}
	for i, w := range ws {
		if w.refused {
			continue
		}
		if j, ok := at[w.token]; ok {
			secs[j].last = i
			continue
		}
		at[w.token] = len(secs)
		secs = append(secs, section{client: w.client, token: w.token, first: i, last: i})
	}
	for i, a := range secs {
		for _, b := range secs[i+1:] {
			if b.first < a.last {
				out = append(out, fmt.Sprintf("%s (token %d) wrote to %s at %v, inside the critical section of %s (token %d, writes from %v to %v)",
					b.client, b.token, r.name, ws[b.first].at, a.client, a.token, ws[a.first].at, ws[a.last].at))
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return errors.New("dlocktest: " + r.name + ": " + strings.Join(out, "; "))
}
