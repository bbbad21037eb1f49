package conformance

import (
	"fmt"
	"sync"
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fenced && (token == 0 || token < r.maxToken || token == r.maxToken && holder != r.maxBy) {
		r.rejected++
		return false
	}
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
	delete(r.inside, holder)
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
