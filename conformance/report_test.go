package conformance

import (
	"strings"
	"testing"
)

func TestSurprise(t *testing.T) {
	for _, tc := range []struct {
		status, expected Status
		surprise         bool
	}{
		{Held, Held, false},
		{Violated, Violated, false},
		{Held, Violated, true}, // a declared weakness that did not reproduce
		{Violated, Held, true}, // a guarantee that broke
		{Unavailable, Held, true},
		{NotApplicable, NotApplicable, false},
		{Held, Sometimes, false},
		{Violated, Sometimes, false},
		{Unavailable, Sometimes, true}, // sometimes violated is no licence to stop answering
		{Held, "", false},              // nothing declared
	} {
		c := Cell{Status: tc.status, Expected: tc.expected, Trials: 8}
		if got := c.Surprise(); got != tc.surprise {
			t.Errorf("status %q, expected %q: Surprise() = %v, want %v", tc.status, tc.expected, got, tc.surprise)
		}
	}
	c := Cell{Status: Violated, Expected: Sometimes, Trials: 8, Violations: 3}
	if s := c.ShortStatus(); !strings.Contains(s, "3/8") || !strings.Contains(s, "timing-dependent") {
		t.Errorf("ShortStatus = %q, want the count and the timing-dependent mark", s)
	}
}

func TestScenarioTrials(t *testing.T) {
	t.Setenv("DLOCK_FAULT_TRIALS", "3")
	c := Capabilities{FaultTrials: map[Scenario]int{Partition: 8, HolderCrash: 1}}
	for s, want := range map[Scenario]int{Partition: 8, HolderCrash: 3, ServerRestart: 3} {
		if got := c.trials(s); got != want {
			t.Errorf("trials(%s) = %d, want %d (FaultTrials raises Trials(), never lowers it)", s, got, want)
		}
	}
	t.Setenv("DLOCK_FAULT_TRIALS", "20")
	if got := c.trials(Partition); got != 20 {
		t.Errorf("trials(Partition) with 20 trials asked = %d, want 20", got)
	}
}
