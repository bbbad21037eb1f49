package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// At most two holders of a semaphore's permits at once; a third is refused (or
// waits, with Acquire).
func ExampleNewSemaphore() {
	ctx := context.Background()
	locker := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer locker.Close()

	sem, err := dlock.NewSemaphore(locker, "exports", 2)
	if err != nil {
		panic(err) // errors.ErrUnsupported on a backend without semaphores
	}
	a, _ := sem.TryAcquire(ctx, dlock.WithTTL(30*time.Second))
	b, _ := sem.TryAcquire(ctx, dlock.WithTTL(30*time.Second))
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third permit:", errors.Is(err, dlock.ErrNotAcquired))

	// Another limit on a key whose permits are held: refused, never two limits.
	other, _ := dlock.NewSemaphore(locker, "exports", 3)
	_, err = other.TryAcquire(ctx)
	fmt.Println("limit 3:", errors.Is(err, dlock.ErrConflict))

	_ = a.Release(ctx)
	_ = b.Release(ctx)
	// Output:
	// third permit: true
	// limit 3: true
}

// Readers share a read-write lock; a writer has it alone.
func ExampleNewRWMutex() {
	ctx := context.Background()
	locker := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer locker.Close()

	rw, err := dlock.NewRWMutex(locker, "catalog")
	if err != nil {
		panic(err)
	}
	r1, _ := rw.AcquireShared(ctx)
	r2, _ := rw.AcquireShared(ctx)
	_, err = rw.TryAcquire(ctx)
	fmt.Println("writer beside two readers:", errors.Is(err, dlock.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	w, err := rw.TryAcquire(ctx)
	fmt.Println("writer alone:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// writer beside two readers: true
	// writer alone: true
}
