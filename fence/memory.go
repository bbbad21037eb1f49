package fence

import (
	"context"
	"sync"
)

// Memory is a Guard whose fences live in this process: the guard of a resource that
// one process serves (behind Handler, say). Its zero value is not usable; call
// NewMemory. Safe for concurrent use.
//
// Not guaranteed: anything across processes, or across a restart of this one — a
// new Memory has forgotten every fence and accepts any token above 0 once. Several
// servers of one resource need a guard whose fences live in a shared store
// (sqlfence, redisfence, etcdfence). It keeps one entry per resource it has seen,
// for its whole life: forgetting a fence would let the stale writers of that
// resource in again.
type Memory struct {
	mu  sync.Mutex
	res map[string]*memResource
}

// memResource is one resource's fence (read and written under Memory.mu) and its
// turn: the one-slot semaphore a check (with the write of Do) holds.
type memResource struct {
	turn  chan struct{}
	state State
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{res: map[string]*memResource{}} }

// Check applies the rule (see Guard). It waits while a Do of the same resource runs,
// until ctx ends (then ctx's error).
func (m *Memory) Check(ctx context.Context, resource string, token uint64, writer string) error {
	return m.Do(ctx, resource, token, writer, nil)
}

// Do is Memory's guarded write: it applies the rule and, when the write is accepted,
// runs fn before any other Check or Do of resource is decided, and returns fn's
// error. A refused write (ErrStale, ErrInvalid) does not run fn. Do waits for the
// resource's turn until ctx ends (then ctx's error, fn not run); fn itself is not
// bounded by ctx: it gets the resource for as long as it runs.
//
// The fence moves when the write is accepted, before fn runs: a write whose fn fails
// has still superseded the older grants.
func (m *Memory) Do(ctx context.Context, resource string, token uint64, writer string, fn func() error) error {
	if err := Validate(resource, token, writer); err != nil {
		return err
	}
	m.mu.Lock()
	r, ok := m.res[resource]
	if !ok {
		r = &memResource{turn: make(chan struct{}, 1)}
		m.res[resource] = r
	}
	m.mu.Unlock()
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.turn }()
	m.mu.Lock()
	next, err := r.state.Admit(resource, token, writer)
	r.state = next
	m.mu.Unlock()
	if err != nil {
		return err
	}
	if fn == nil {
		return nil
	}
	return fn()
}

// Fence returns resource's fence: the highest token accepted and its writer (the
// zero State if none).
func (m *Memory) Fence(resource string) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.res[resource]; ok {
		return r.state
	}
	return State{}
}
