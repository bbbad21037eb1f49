package generic

import (
	"context"
	"testing"
	"time"
)

// Close waits for the work that runs, and work asked for after Close never runs.
func TestBackgroundCloseWaits(t *testing.T) {
	b := &Background{Timeout: time.Minute}
	started, release := make(chan struct{}), make(chan struct{})
	var finished bool
	b.Go(func(ctx context.Context) {
		close(started)
		<-release
		finished = true
	})
	<-started
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while work was running")
	case <-time.After(50 * time.Millisecond): // Close has had its chance to return early
	}
	close(release)
	<-closed
	if !finished {
		t.Fatal("Close returned before the work finished")
	}
	b.Go(func(context.Context) { t.Error("work ran after Close") })
	b.Close()
}

// Each piece of work gets a context bounded by Timeout.
func TestBackgroundTimeout(t *testing.T) {
	b := &Background{Timeout: 10 * time.Millisecond}
	done := make(chan error, 1)
	b.Go(func(ctx context.Context) {
		<-ctx.Done()
		done <- ctx.Err()
	})
	b.Close()
	if err := <-done; err != context.DeadlineExceeded {
		t.Fatalf("the work's context ended with %v, want DeadlineExceeded", err)
	}
}
