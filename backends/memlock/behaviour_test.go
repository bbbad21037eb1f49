package memlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// TestCloseEndsWaits: closing a Locker ends its waiting Acquires with ErrClosed and
// takes them out of the queue (the suite's FIFO property checks the order).
func TestCloseEndsWaits(t *testing.T) {
	s := memlock.NewStore()
	const key = "k"
	holder := memlock.New(memlock.WithStore(s))
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := holder.TryAcquire(ctx, key); err != nil {
		t.Fatal(err)
	}
	w := memlock.New(memlock.WithStore(s))
	errc := make(chan error, 1)
	go func() { _, err := w.Acquire(ctx, key); errc <- err }()
	for deadline := time.Now().Add(10 * time.Second); s.Waiting(key) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting after 10s, want 1", s.Waiting(key))
		}
		time.Sleep(time.Millisecond) // the queue is polled: no event announces a waiter
	}
	w.Close()
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a wait ended by Close: %v, want ErrClosed", err)
	}
	if n := s.Waiting(key); n != 0 {
		t.Errorf("%d still queued after Close", n)
	}
}

// TestExpiredLocksAreReaped: locks that expire without a release do not stay in the
// Store: 10,000 of them are gone after the next grant a second later.
func TestExpiredLocksAreReaped(t *testing.T) {
	s := memlock.NewStore()
	l := memlock.New(memlock.WithStore(s))
	defer l.Close()
	ctx := context.Background()
	const n = 10000
	for i := range n {
		if _, err := l.TryAcquire(ctx, fmt.Sprint("k", i), dlock.WithTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	reapAfter(t, l, "last")
	if got := s.Size(); got != 1 {
		t.Errorf("Store keeps %d entries after %d leases expired unreleased and one was granted, want 1", got, n)
	}
}

// reapAfter waits until leases of a second's TTL have expired and the Store's
// reaping interval has passed, then has l take key (held until t ends): the grant
// that reaps.
func reapAfter(t *testing.T, l dlock.Locker, key string) {
	t.Helper()
	time.Sleep(2100 * time.Millisecond) // expiry and reaping go by the clock: nothing to wait on
	ls, err := l.TryAcquire(context.Background(), key, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Release(context.Background()) })
}

// TestElectionRecordsPruned: a Store keeps no record of an election that has
// neither a live term nor an observer: not after a resignation, not for a name
// only observed once its observer stops, not after a term expired unreleased (at
// the next grant a second later). A term after that gap still gets a larger
// token.
func TestElectionRecordsPruned(t *testing.T) {
	s := memlock.NewStore()
	l := memlock.New(memlock.WithStore(s))
	defer l.Close()
	ctx := context.Background()
	const n = 100
	elections := make([]*dlock.Election, n)
	var last uint64
	for i := range elections {
		e, err := dlock.NewElection(l, fmt.Sprint("e", i))
		if err != nil {
			t.Fatal(err)
		}
		elections[i] = e
		term, err := e.TryCampaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		last = term.Token()
		if err := term.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Elections(); got != 0 {
		t.Errorf("%d election records after %d terms were released, want 0", got, n)
	}
	for i := range 10 {
		e, err := dlock.NewElection(l, fmt.Sprint("watched", i))
		if err != nil {
			t.Fatal(err)
		}
		octx, cancel := context.WithCancel(ctx)
		ch := e.Observe(octx)
		// The observer keeps a record while it watches: wait for it to start.
		for deadline := time.Now().Add(5 * time.Second); s.Elections() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no record for an observed election within 5s")
			}
		}
		cancel()
		for range ch { // closed once the observer has stopped
		}
		if got := s.Elections(); got != 0 {
			t.Fatalf("%d election records after a name was observed and its observer stopped, want 0", got)
		}
	}
	term, err := elections[0].TryCampaign(ctx, "expires", dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if term.Token() <= last {
		t.Errorf("token %d after the records were pruned, want above %d", term.Token(), last)
	}
	reapAfter(t, l, "grant")
	if got := s.Elections(); got != 0 {
		t.Errorf("%d election records after the only term expired and a grant reaped, want 0", got)
	}
}

// TestCandidatesQueue: Campaign waits among the election's candidates in arrival
// order, and a resignation hands the term to the first of them at once: five
// candidates that each resign as soon as they lead lead in the order they came,
// each seen as the leader with its own value.
func TestCandidatesQueue(t *testing.T) {
	s := memlock.NewStore()
	l := memlock.New(memlock.WithStore(s))
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := dlock.NewElection(l, "e")
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.TryCampaign(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	order := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		v := fmt.Sprint("candidate", i)
		go func() {
			ls, err := e.Campaign(ctx, v)
			if err != nil {
				errs <- err
				return
			}
			if lead, err := e.Leader(ctx); err != nil || lead.Value != v {
				errs <- fmt.Errorf("%s leads, Leader says %+v, %v", v, lead, err)
				return
			}
			order <- v
			errs <- ls.Release(ctx)
		}()
		for s.Candidates("e") < i+1 { // the next candidate comes after this one queued
			select {
			case err := <-errs:
				t.Fatalf("a candidate ended before the first resigned: %v", err)
			case <-ctx.Done():
				t.Fatalf("%d candidates queued, want %d", s.Candidates("e"), i+1)
			case <-time.After(time.Millisecond): // the Store announces nothing
			}
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if v, want := <-order, fmt.Sprint("candidate", i); v != want {
			t.Fatalf("term %d went to %s, want %s (arrival order)", i+1, v, want)
		}
	}
}
