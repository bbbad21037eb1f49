package zklock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestCuratorLatchInterop: a Curator LeaderLatch on zklock.ElectionPath and a dlock
// Election of that name are one election: neither leads while the other does, each
// takes over when the other resigns, and each reads the other's leader.
func TestCuratorLatchInterop(t *testing.T) {
	z := servertest.ZooKeeper(t)
	cur := startCurator(t, "CuratorLatch", z.Addrs())
	const root = "/curator-latch"
	l, err := dlock.Open(ctxFor(t, 30*time.Second), "zk://"+strings.Join(z.Addrs(), ",")+root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx := ctxFor(t, time.Minute)
	name := "jobs/" + t.Name()
	path := zklock.ElectionPath(root, name)
	e, err := dlock.NewElection(l, name)
	if err != nil {
		t.Fatal(err)
	}

	// Curator leads: dlock sees its id and does not win.
	if got := cur.do("latch %s curator-1", path); got != "STARTED" {
		t.Fatalf("Curator latch: %s", got)
	}
	if got := cur.do("await 10000"); got != "LEADER" {
		t.Fatalf("Curator await on an empty election: %s", got)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "curator-1" {
		t.Errorf("dlock's Leader while Curator leads: %+v, %v", ld, err)
	}
	if ls, err := e.TryCampaign(ctx, "dlock"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("dlock's TryCampaign while Curator leads: %v, want ErrNotAcquired", err)
		if err == nil {
			_ = ls.Release(ctx)
		}
	}
	type result struct {
		ls  dlock.Lease
		err error
	}
	won := make(chan result, 1)
	go func() {
		ls, err := e.Campaign(ctx, "dlock")
		won <- result{ls, err}
	}()
	select {
	case r := <-won:
		t.Fatalf("dlock's Campaign returned while Curator leads: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}

	// Curator resigns: dlock leads, and a new Curator latch waits behind it.
	if got := cur.do("close"); got != "OK" {
		t.Fatalf("Curator close: %s", got)
	}
	r := <-won
	if r.err != nil {
		t.Fatalf("dlock's Campaign after Curator resigned: %v", r.err)
	}
	if got := cur.do("latch %s curator-2", path); got != "STARTED" {
		t.Fatalf("Curator latch: %s", got)
	}
	if got := cur.do("await 1000"); got != "TIMEOUT" {
		t.Errorf("Curator await while dlock leads: %s, want TIMEOUT", got)
	}
	if got := cur.do("leader"); got != "ID dlock" {
		t.Errorf("Curator's getLeader while dlock leads: %s, want ID dlock", got)
	}

	// dlock resigns: Curator leads.
	if err := r.ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cur.do("await 10000"); got != "LEADER" {
		t.Errorf("Curator await after dlock resigned: %s", got)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "curator-2" {
		t.Errorf("dlock's Leader after dlock resigned: %+v, %v", ld, err)
	}
	if got := cur.do("close"); got != "OK" {
		t.Fatalf("Curator close: %s", got)
	}
}
