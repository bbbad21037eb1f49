package benchkit

import (
	"context"
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
	if c.Handoffs == 0 || len(c.PerClient) != 4 {
		t.Fatalf("no hand-offs: %+v", c)
	}
	tp, err := ManyKeys(context.Background(), ls, "mk", 16, 100*time.Millisecond)
	if err != nil || tp.Ops == 0 {
		t.Fatalf("ManyKeys: %+v %v", tp, err)
	}
	t.Log(c, "|", tp)
}
