package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/fencetest"
)

// memoryWrite is Memory's guarded write of a value into v.
func memoryWrite(m *fence.Memory, v *values) fencetest.Write {
	return func(ctx context.Context, resource string, token uint64, writer, value string) error {
		return m.Do(ctx, resource, token, writer, func() error { v.set(resource, value); return nil })
	}
}

// TestMemoryLateWrite: a holder whose lease ended while it stalled writes after the
// next holder: Memory refuses it, and the value is the next holder's.
func TestMemoryLateWrite(t *testing.T) {
	a, b := memLockers(t)
	m, v := fence.NewMemory(), &values{}
	fencetest.LateWrite(t, a, b, "invoices/42", 100*time.Millisecond, memoryWrite(m, v), v.get)
	if f := m.Fence("invoices/42"); f.Token == 0 || f.Writer == "" {
		t.Fatalf("Fence = %+v after two accepted grants", f)
	}
}

// TestMemoryConcurrent: concurrent writers end with the largest token's value.
func TestMemoryConcurrent(t *testing.T) {
	v := &values{}
	fencetest.Concurrent(t, "r", 50, memoryWrite(fence.NewMemory(), v), v.get)
}

// TestMemoryDoHoldsTheResource: while an accepted write runs in Do, a newer token's
// Check waits (so the older write cannot land after the newer one), until its
// context ends; another resource is not held up.
func TestMemoryDoHoldsTheResource(t *testing.T) {
	m := fence.NewMemory()
	inside, leave := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- m.Do(context.Background(), "r", 1, "old", func() error { close(inside); <-leave; return nil })
	}()
	<-inside
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := m.Check(ctx, "r", 2, "new"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a newer Check while the older write runs: %v, want it to wait until its context ends", err)
	}
	if err := m.Check(context.Background(), "other", 1, "w"); err != nil {
		t.Fatalf("another resource: %v", err)
	}
	newer := make(chan error, 1)
	go func() { newer <- m.Check(context.Background(), "r", 2, "new") }()
	close(leave)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-newer; err != nil {
		t.Fatalf("the newer Check once the older write ended: %v", err)
	}
	err := m.Do(context.Background(), "r", 1, "old", func() error { t.Error("a refused write ran"); return nil })
	if !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the older grant after the newer: %v, want ErrStale", err)
	}
}
