package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

// plainLocker is a Locker not made by dlock.New.
type plainLocker struct{ dlock.Locker }

func TestPrimitivesInputErrors(t *testing.T) {
	ctx := context.Background()
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	if _, err := dlock.NewElection(plainLocker{l}, "e"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewElection on a Locker not made by New: %v, want ErrUnsupported", err)
	}
	if _, err := dlock.AcquireAll(ctx, plainLocker{l}, []string{"a"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("AcquireAll on a Locker not made by New: %v, want ErrUnsupported", err)
	}
	for _, name := range []string{"", strings.Repeat("n", dlock.MaxKeyLen+1), "\xff"} {
		_, err := dlock.NewElection(l, name)
		if !errors.Is(err, dlock.ErrInvalidName) || errors.Is(err, dlock.ErrInvalidKey) {
			t.Errorf("NewElection with the name %q: %v, want ErrInvalidName (not ErrInvalidKey)", name, err)
		}
	}
	e, err := dlock.NewElection(l, "e")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Campaign(ctx, strings.Repeat("v", dlock.MaxValueLen+1)); !errors.Is(err, dlock.ErrInvalidValue) {
		t.Errorf("Campaign with a value too long: %v, want ErrInvalidValue", err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader of an election nobody campaigned in: %v, want ErrNoLeader", err)
	}
	many := make([]string, dlock.MaxSetKeys+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, keys := range [][]string{nil, {"a", "\xff"}, many} {
		if _, err := dlock.TryAcquireAll(ctx, l, keys); !errors.Is(err, dlock.ErrInvalidKey) {
			t.Errorf("TryAcquireAll(%d keys): %v, want ErrInvalidKey", len(keys), err)
		}
	}
	if _, err := dlock.TryAcquireAll(ctx, l, []string{"a", "\xff"}); err == nil || !strings.Contains(err.Error(), "key 1") {
		t.Errorf("the error does not name the bad key: %v", err)
	}
}

func TestSetKeyAndDuplicates(t *testing.T) {
	if got, want := dlock.SetKey([]string{"b", "a b", "b"}), `"a b" "b"`; got != want {
		t.Errorf("SetKey = %q, want %q", got, want)
	}
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	ctx := context.Background()
	ls, err := dlock.TryAcquireAll(ctx, l, []string{"y", "x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	set := ls.(*dlock.SetLease)
	if k := set.Keys(); len(k) != 2 || k[0] != "x" || k[1] != "y" || ls.Key() != `"x" "y"` {
		t.Errorf("Keys %q, Key %q", k, ls.Key())
	}
	if set.TokenOf("x") == 0 || set.TokenOf("y") == 0 || set.TokenOf("z") != 0 || ls.Token() < set.TokenOf("x") {
		t.Errorf("tokens: x %d, y %d, z %d, set %d", set.TokenOf("x"), set.TokenOf("y"), set.TokenOf("z"), ls.Token())
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInstrumentedPrimitives: an Instrument wrapper's Observer sees campaigns and
// sets, and Close ends an observer's stream.
func TestInstrumentedPrimitives(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventAcquire && e.Err == nil {
			mu.Lock()
			keys = append(keys, e.Key)
			mu.Unlock()
		}
	})
	l := dlock.Instrument(memlock.New(memlock.WithStore(memlock.NewStore())), obs)
	ctx := context.Background()
	e, err := dlock.NewElection(l, "e")
	if err != nil {
		t.Fatal(err)
	}
	stream := e.Observe(ctx)
	term, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	if ld := <-stream; ld.Value != "me" || ld.Token != term.Token() || ld.Name != "e" {
		t.Errorf("observed %+v, want the term (token %d)", ld, term.Token())
	}
	set, err := dlock.AcquireAll(ctx, l, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] != "e" || keys[1] != `"a" "b"` {
		t.Errorf("the Observer saw acquisitions of %q, want the campaign and the set", keys)
	}
	mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, open := <-stream:
		if open {
			t.Error("Observe reported a leader after Close")
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe's stream stayed open after Close")
	}
	if !errors.Is(term.Err(), dlock.ErrClosed) || !errors.Is(set.Err(), dlock.ErrClosed) {
		t.Errorf("after Close: term %v, set %v; want ErrClosed", term.Err(), set.Err())
	}
	if _, err := e.Leader(ctx); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("Leader after Close: %v, want ErrClosed", err)
	}
}
