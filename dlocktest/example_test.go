package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// worker is the code under test: it holds "job" with auto-renewal and writes to
// db every second until ctx ends. honour: it checks its lease before each write
// and stops once the lease has ended; without it, it is the worker that does
// not stop.
func worker(ctx context.Context, l dlock.Locker, db *dlocktest.Resource, honour bool) {
	ls, err := l.Acquire(ctx, "job", dlock.WithTTL(15*time.Second), dlock.WithAutoRenew())
	if err != nil {
		return
	}
	defer ls.Release(context.WithoutCancel(ctx))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if honour {
			select {
			case <-ls.Done():
				return // the lease ended: stop writing
			default:
			}
		}
		db.Write(ls)
	}
}

// checkWorker runs worker in a synctest bubble: it works for 5s, then its client
// is cut off from the store for a minute (its renewals go unanswered, so its
// lease ends at its validity deadline), and returns what the Resource's Check
// found. The minute passes in virtual time.
func checkWorker(t *testing.T, honour bool) (err error) {
	synctest.Test(t, func(t *testing.T) {
		store := dlocktest.NewStore()
		defer store.Close()
		a := store.Client("a")
		db := store.NewResource("db")
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); worker(ctx, a, db, honour) }()
		time.Sleep(5 * time.Second)
		a.Partition()
		time.Sleep(time.Minute)
		cancel()
		<-done
		err = db.Check()
	})
	return err
}

// TestExampleWorker is the example a user's test follows (Go's examples cannot
// run in a synctest bubble, which needs a *testing.T): a worker that ignores
// Done fails the Resource's Check, one that honours it passes — a minute of
// lease time in a few milliseconds of wall time.
func TestExampleWorker(t *testing.T) {
	start := time.Now()
	err := checkWorker(t, false)
	if err == nil {
		t.Error("the worker that ignores Done passed the Resource's Check")
	} else {
		t.Logf("the worker that ignores Done: %v", err)
	}
	if err := checkWorker(t, true); err != nil {
		t.Errorf("the worker that honours Done: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a minute of virtual time took %v of wall time", d)
	}
}

// A leader loop's hand-over: the leader's session ends, its term's Done closes
// with the cause, and the waiting candidate wins the next term, with a larger
// fencing token.
func Example_leaderHandOver() {
	store := dlocktest.NewStore()
	defer store.Close()
	ctx := context.Background()
	ea, _ := dlock.NewElection(store.Client("a"), "scheduler")
	eb, _ := dlock.NewElection(store.Client("b"), "scheduler")
	opts := []dlock.Option{dlock.WithTTL(10 * time.Second), dlock.WithAutoRenew()}

	termA, err := ea.Campaign(ctx, "a", opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a leads")
	won := make(chan dlock.Lease)
	go func() {
		term, err := eb.Campaign(ctx, "b", opts...) // waits while a leads
		if err != nil {
			fmt.Println(err)
		}
		won <- term
	}()

	if err := store.Lose(termA, dlock.CauseSession); err != nil { // a's session ends
		fmt.Println(err)
		return
	}
	<-termA.Done()
	fmt.Println("a stepped down:", termA.Err())
	termB := <-won
	fmt.Println("b leads, with a larger token:", termB.Token() > termA.Token())
	termB.Release(ctx)
	// Output:
	// a leads
	// a stepped down: dlock: lease lost: session ended: dlocktest: the test made the store lose the lock (session ended)
	// b leads, with a larger token: true
}

// A fenced write path: a holder whose lock the store dropped without a word (a
// pause past its TTL) still believes it holds the lock, and another client is
// granted it; the fenced Resource refuses the stale holder's write.
func ExampleStore_TakeOver() {
	store := dlocktest.NewStore()
	defer store.Close()
	ctx := context.Background()
	a, b := store.Client("a"), store.Client("b")
	db := store.NewFencedResource("db")

	stale, _ := a.Acquire(ctx, "k", dlock.WithTTL(10*time.Second))
	fmt.Println("a writes:", db.Write(stale))
	fresh, err := store.TakeOver(ctx, stale, b, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("b writes:", db.Write(fresh))
	err = db.Write(stale)
	fmt.Println("a writes again, refused:", errors.Is(err, dlocktest.ErrStale))
	fmt.Println("a's lease looks valid:", stale.Err() == nil)
	// Output:
	// a writes: <nil>
	// b writes: <nil>
	// a writes again, refused: true
	// a's lease looks valid: true
}
