package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// Two candidates, one leader at a time: the second leads once the first resigns, and
// observers see each term in order.
func ExampleElection() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(store)), memlock.New(memlock.WithStore(store))
	defer a.Close()
	defer b.Close()
	ea, _ := dlock.NewElection(a, "scheduler")
	eb, _ := dlock.NewElection(b, "scheduler")
	leaders := eb.Observe(ctx)

	term, _ := ea.Campaign(ctx, "host-a", dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
	fmt.Println((<-leaders).Value)
	_, err := eb.TryCampaign(ctx, "host-b")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))

	_ = term.Release(ctx) // resign
	next, _ := eb.Campaign(ctx, "host-b")
	ld := <-leaders
	fmt.Println(ld.Value, ld.Token > term.Token())
	_ = next.Release(ctx)
	// Output:
	// host-a
	// true
	// host-b true
}

// A set of keys is taken whole or not at all, and excludes the single locks on its
// keys.
func ExampleAcquireAll() {
	ctx := context.Background()
	store := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(store)), memlock.New(memlock.WithStore(store))
	defer a.Close()
	defer b.Close()

	held, _ := b.TryAcquire(ctx, "account/42")
	_, err := dlock.TryAcquireAll(ctx, a, []string{"account/17", "account/42"})
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	free, _ := b.TryAcquire(ctx, "account/17") // the failed attempt left nothing held
	_ = free.Release(ctx)

	_ = held.Release(ctx)
	set, _ := dlock.AcquireAll(ctx, a, []string{"account/42", "account/17"})
	fmt.Println(set.Key())
	_ = set.Release(ctx)
	// Output:
	// true
	// "account/17" "account/42"
}
