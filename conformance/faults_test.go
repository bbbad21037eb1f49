package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/spec"
)

func TestScenarioTrials(t *testing.T) {
	t.Setenv("DLOCK_FAULT_TRIALS", "3")
	c := spec.Capabilities{FaultTrials: map[spec.Scenario]int{spec.Partition: 8, spec.HolderCrash: 1}}
	for s, want := range map[spec.Scenario]int{spec.Partition: 8, spec.HolderCrash: 3, spec.ServerRestart: 3} {
		if got := trials(c, s); got != want {
			t.Errorf("trials(%s) = %d, want %d (FaultTrials raises the default, never lowers it)", s, got, want)
		}
	}
	t.Setenv("DLOCK_FAULT_TRIALS", "20")
	if got := trials(c, spec.Partition); got != 20 {
		t.Errorf("trials(Partition) with 20 trials asked = %d, want 20", got)
	}
}

// TestChildAcquireElection: a holder child of the "election" kind leads the
// election its key names (what the election scenarios' contenders campaign in),
// and a contender of the election subject is refused while it leads.
func TestChildAcquireElection(t *testing.T) {
	s := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(s)), memlock.New(memlock.WithStore(s))
	defer a.Close()
	defer b.Close()
	ctx := ctxFor(t, 10*time.Second)
	ls, err := childAcquire(ctx, a, "jobs", "election", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Release(ctx)
	e, err := dlock.NewElection(b, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != candidateValue || ld.Token != ls.Token() {
		t.Errorf("Leader: %+v, %v; want the child's term (token %d)", ld, err, ls.Token())
	}
	p := &subject{kind: "election"}
	if _, err := p.contender(t, b, "jobs").TryAcquire(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("a contender while the child leads: %v, want ErrNotAcquired", err)
	}
}
