package measure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i))
	}
	l := Summarize(s)
	if l.N != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 || l.Mean != 50 {
		t.Fatalf("Summarize(1..100) = %+v", l)
	}
}

func TestJain(t *testing.T) {
	if j := Jain([]int{5, 5, 5, 5}); j != 1 {
		t.Errorf("equal shares: %v", j)
	}
	if j := Jain([]int{8, 0, 0, 0}); j != 0.25 {
		t.Errorf("one takes all: %v", j)
	}
}

func TestContendOnMemlock(t *testing.T) {
	store := memlock.NewStore()
	var ls []dlock.Locker
	for range 4 {
		l := memlock.New(memlock.WithStore(store))
		defer l.Close()
		ls = append(ls, l)
	}
	c, err := Contend(context.Background(), ls, "k", 200*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Handoffs == 0 || len(c.PerClient) != 4 || c.Transfers == 0 || c.Transfers > c.Handoffs {
		t.Fatalf("no hand-offs, or more transfers than grants: %+v", c)
	}
	// One client alone: every grant but the first goes back to the same client.
	solo, err := Contend(context.Background(), ls[:1], "solo", 50*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if solo.Handoffs < 2 || solo.Transfers != 1 {
		t.Fatalf("one client: %d grants, %d transfers; want several grants and 1 transfer", solo.Handoffs, solo.Transfers)
	}
	tp, err := ManyKeys(context.Background(), ls, "mk", 16, 100*time.Millisecond)
	if err != nil || tp.Ops == 0 {
		t.Fatalf("ManyKeys: %+v %v", tp, err)
	}
	t.Log(c, "|", tp)
}

func TestInterleave(t *testing.T) {
	calls := make([]int, 3)
	mk := func(i int, d time.Duration) func() error {
		return func() error { calls[i]++; time.Sleep(d); return nil }
	}
	lat, err := Interleave(2, 10, mk(0, 0), mk(1, 2*time.Millisecond), mk(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range calls {
		if n != 12 || lat[i].N != 10 {
			t.Fatalf("contender %d: %d calls, %d samples; want 12 calls (2 warm-up), 10 samples", i, n, lat[i].N)
		}
	}
	if lat[1].P50 < 2*time.Millisecond || lat[0].P50 >= 2*time.Millisecond {
		t.Fatalf("samples not attributed to their contender: %v", lat)
	}
	boom := errors.New("boom")
	if _, err := Interleave(0, 5, mk(0, 0), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("error not returned: %v", err)
	}
}

var sink []*[64]byte

func TestAllocs(t *testing.T) {
	allocs, bytes, err := Allocs(1000, func() error {
		sink = append(sink[:0], new([64]byte), new([64]byte))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two allocations of 64 bytes per call, give or take the runtime's own.
	if allocs < 2 || allocs > 2.5 || bytes < 128 || bytes > 200 {
		t.Fatalf("Allocs = %.2f allocs, %.0f bytes per call; want about 2 and 128", allocs, bytes)
	}
}

func TestAcquireCycle(t *testing.T) {
	l := memlock.New()
	defer l.Close()
	ctx := context.Background()
	if err := AcquireCycle(ctx, l, "k"); err != nil {
		t.Fatal(err)
	}
	ls, err := l.Acquire(ctx, "k") // free again: the cycle released it
	if err != nil {
		t.Fatal(err)
	}
	ls.Release(ctx)
}
