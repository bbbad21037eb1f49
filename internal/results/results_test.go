package results

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/spec"
)

func TestSurprise(t *testing.T) {
	for _, tc := range []struct {
		status, expected spec.Status
		surprise         bool
	}{
		{spec.Held, spec.Held, false},
		{spec.Violated, spec.Violated, false},
		{spec.Held, spec.Violated, true}, // a declared weakness that did not reproduce
		{spec.Violated, spec.Held, true}, // a guarantee that broke
		{spec.Unavailable, spec.Held, true},
		{spec.NotApplicable, spec.NotApplicable, false},
		{spec.Held, spec.Sometimes, false},
		{spec.Violated, spec.Sometimes, false},
		{spec.Unavailable, spec.Sometimes, true}, // sometimes violated is no licence to stop answering
		{spec.Held, "", false},                   // nothing declared
	} {
		c := Cell{Status: tc.status, Expected: tc.expected, Trials: 8}
		if got := c.Surprise(); got != tc.surprise {
			t.Errorf("status %q, expected %q: Surprise() = %v, want %v", tc.status, tc.expected, got, tc.surprise)
		}
	}
	c := Cell{Status: spec.Violated, Expected: spec.Sometimes, Trials: 8, Violations: 3}
	if s := c.ShortStatus(); !strings.Contains(s, "3/8") || !strings.Contains(s, "timing-dependent") {
		t.Errorf("ShortStatus = %q, want the count and the timing-dependent mark", s)
	}
}
