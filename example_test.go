package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// A job under a lock: acquire, work while the lease is held, release.
func Example() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "mem://") // or "redis://127.0.0.1:6379", "etcd://…", …
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "reports/daily", dlock.WithTTL(30*time.Second), dlock.WithAutoRenew())
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	select {
	case <-lease.Done(): // lost: stop touching the shared resource
		fmt.Println("lost:", lease.Err())
	default:
		fmt.Println("holding", lease.Key())
	}
	// Output: holding reports/daily
}

// TryAcquire makes one attempt and reports a held lock with ErrNotAcquired.
func ExampleLocker_TryAcquire() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(store)), memlock.New(memlock.WithStore(store))
	defer a.Close()
	defer b.Close()

	held, _ := a.TryAcquire(ctx, "invoice-42")
	_, err := b.TryAcquire(ctx, "invoice-42")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))

	_ = held.Release(ctx)
	lease, err := b.TryAcquire(ctx, "invoice-42")
	fmt.Println(err, lease.Key())
	// Output:
	// true
	// <nil> invoice-42
}

// Fencing tokens grow with every grant of a key; a resource that remembers the
// highest token it has seen can refuse a stale holder's write.
func ExampleLease_Token() {
	ctx := context.Background()
	locker := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer locker.Close()

	first, _ := locker.Acquire(ctx, "k")
	_ = first.Release(ctx)
	second, _ := locker.Acquire(ctx, "k")
	defer second.Release(ctx)
	fmt.Println(second.Token() > first.Token())
	// Output: true
}

// Without auto-renewal a lease ends at its validity deadline; Err says why.
func ExampleLease_Done() {
	ctx := context.Background()
	locker := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer locker.Close()

	lease, _ := locker.Acquire(ctx, "k", dlock.WithTTL(50*time.Millisecond))
	<-lease.Done()
	fmt.Println(lease.Err())
	fmt.Println(errors.Is(lease.Release(ctx), dlock.ErrNotHeld))
	// Output:
	// dlock: lease expired
	// true
}

// Retry strategies bound how Acquire waits where no wake-up comes.
func ExampleLimitRetry() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(store)), memlock.New(memlock.WithStore(store))
	defer a.Close()
	defer b.Close()

	held, _ := a.Acquire(ctx, "k", dlock.WithTTL(time.Minute))
	defer held.Release(ctx)
	_, err := b.Acquire(ctx, "k", dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(time.Millisecond), 3)))
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	// Output: true
}
