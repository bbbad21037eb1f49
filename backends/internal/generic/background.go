package generic

import (
	"context"
	"sync"
	"time"
)

// Background runs a driver's best-effort work — the clean-up after an interrupted
// request, a holder record — after the call that asked for it has returned (so that
// call returns at once, even on a stalled network), each piece with a fresh context
// bounded by Timeout. Close refuses further work and waits for what runs, so no
// statement outlives the driver's Close. The zero value with Timeout set is ready;
// safe for concurrent use. Nothing is retried: work that fails is dropped.
type Background struct {
	Timeout time.Duration

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
}

// Go runs f in the background unless Close has been called (then f never runs).
func (b *Background) Go(f func(ctx context.Context)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.running.Add(1)
	go func() {
		defer b.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), b.Timeout)
		defer cancel()
		f(ctx)
	}()
}

// Close refuses further work and waits for the work that runs (at most Timeout
// each, if it honours its context).
func (b *Background) Close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.running.Wait()
}
