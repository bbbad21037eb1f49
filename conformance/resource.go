package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/fence"
)

// Resource is the oracle for mutual exclusion: the thing the lock protects. Every
// holder enters it with its token when its critical section starts and leaves it
// when it ends. It records every moment two holders were inside at once and, when
// fenced, makes the check a fenced storage service should make: it refuses token 0
// (no fencing), and a token not above the highest it has accepted — unless it comes
// from the holder that presented that highest token (one grant may write several
// times). Equal tokens from two holders are refused: a store that lost writes (an
// asynchronous failover) can hand one token out twice. Safe for concurrent use.
type Resource struct {
	fenced bool
	rec    *recorder // the suite's: entries and leaves go into its trial's history
	// guards decide every entry too, each on the resource named guarded (the
	// suite's, with a recorder: FenceGuarder).
	guards  []FenceGuard
	guarded string

	mu       sync.Mutex
	inside   map[string]uint64 // holder → token
	maxToken uint64
	maxBy    string // the holder that presented maxToken
	entries  int
	rejected int
	overlaps []string
}

// NewResource returns an empty Resource; fenced makes it reject stale tokens.
func NewResource(fenced bool) *Resource {
	return &Resource{fenced: fenced, inside: map[string]uint64{}}
}

// Enter records that holder, with token, starts its critical section. It returns
// false (and records nothing else) when the Resource is fenced and refuses the
// token (see Resource): the holder's lease is stale, or could be, and its write is
// refused.
func (r *Resource) Enter(holder string, token uint64) bool {
	ok := r.enter(holder, token)
	for _, g := range r.guards {
		r.guardEnter(g, holder, token)
	}
	return ok
}

func (r *Resource) enter(holder string, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenced && (token == 0 || token < r.maxToken || token == r.maxToken && holder != r.maxBy) {
		r.rejected++
		r.record(Event{Client: holder, Op: OpEnter, Phase: Fail, Token: token})
		return false
	}
	r.record(Event{Client: holder, Op: OpEnter, Phase: OK, Token: token})
	if token > r.maxToken || r.maxBy == "" {
		r.maxToken, r.maxBy = token, holder
	}
	r.entries++
	for other, t := range r.inside {
		r.overlaps = append(r.overlaps, fmt.Sprintf("%s (token %d) entered while %s (token %d) was inside", holder, token, other, t))
	}
	r.inside[holder] = token
	return true
}

// Leave records that holder's critical section ended.
func (r *Resource) Leave(holder string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Event{Client: holder, Op: OpLeave})
	for _, g := range r.guards {
		r.record(Event{Client: holder, Op: OpLeave, Resource: g.Name})
	}
	delete(r.inside, holder)
}

// guardTimeout bounds one guard's decision.
const guardTimeout = 30 * time.Second

// guardEnter asks g whether holder may write with token (its name is its writer)
// and records the call and the answer: accepted, refused (ErrStale), or — a guard
// whose store failed decided nothing — a note.
func (r *Resource) guardEnter(g FenceGuard, holder string, token uint64) {
	h := r.rec.hist()
	e := Event{Client: holder, Op: OpEnter, Phase: Call, Seq: h.next(), Token: token, Resource: g.Name}
	h.add(e)
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	err := g.Guard.Check(ctx, r.guarded, token, holder)
	e.T, e.Phase = 0, OK
	switch {
	case errors.Is(err, fence.ErrStale):
		e.Phase, e.Err = Fail, err.Error()
	case err != nil:
		h.add(Event{Op: OpNote, Note: fmt.Sprintf("guard %s could not decide %s's entry with token %d: %v", g.Name, holder, token, err)})
		return
	}
	h.add(e)
}

// record adds e to the trial's history, if the Resource has one; the caller holds
// r.mu, so the history has the Resource's decisions in the order it made them.
func (r *Resource) record(e Event) {
	if r.rec != nil {
		r.rec.hist().add(e)
	}
}

// newRecordedResource is a Resource whose decisions go into rec's histories.
func newRecordedResource(fenced bool, rec *recorder) *Resource {
	r := NewResource(fenced)
	r.rec = rec
	return r
}

// newGuardedResource is a fenced, recorded Resource whose entries guards decide
// too, on the resource named name.
func newGuardedResource(rec *recorder, name string, guards []guardRun) *Resource {
	r := newRecordedResource(true, rec)
	r.guarded = name
	for _, g := range guards {
		r.guards = append(r.guards, g.g)
	}
	return r
}

// Overlaps returns one line of evidence per entry that found another holder inside.
func (r *Resource) Overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlaps...)
}

// Stats returns how many entries were accepted and how many were rejected as stale.
func (r *Resource) Stats() (entries, rejected int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entries, r.rejected
}
