package conformance

import (
	"testing"

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
