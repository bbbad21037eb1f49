package conformance_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// clockHarness is memlock declared to hold through a clock jump, with a JumpClock
// that only counts its calls.
type clockHarness struct {
	store *memlock.Store
	jumps *atomic.Int64
}

func (h clockHarness) NewLocker(t testing.TB) dlock.Locker {
	return memlock.New(memlock.WithStore(h.store))
}

func (h clockHarness) Capabilities() spec.Capabilities {
	c := conformance.MustDeclare("mem://")
	c.FaultOutcomes = maps.Clone(c.FaultOutcomes)
	if c.FaultOutcomes == nil {
		c.FaultOutcomes = map[spec.Scenario]spec.Status{}
	}
	c.FaultOutcomes[spec.ClockJump] = spec.Held
	return c
}

func (h clockHarness) Name() string                            { return "mem-clock" }
func (h clockHarness) JumpClock(t testing.TB, d time.Duration) { h.jumps.Add(1) }

// limitedClock cannot jump the clock where it runs, and says why.
type limitedClock struct{ clockHarness }

const clockReason = "the servers run in containers on another kernel"

func (limitedClock) UnavailableFaults() map[spec.Scenario]string {
	return map[spec.Scenario]string{spec.ClockJump: clockReason}
}

// TestFaultLimiter: a scenario the harness says it cannot inject here is not run
// (its fault is never called) and is reported not applicable with the reason.
func TestFaultLimiter(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(results.DirEnv, dir)
	h := limitedClock{clockHarness{memlock.NewStore(), new(atomic.Int64)}}
	t.Run("limited", func(t *testing.T) { conformance.RunFaults(t, h) })
	if n := h.jumps.Load(); n != 0 {
		t.Errorf("JumpClock called %d times on a harness that says it cannot jump the clock", n)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "faults-mem-clock-*.json"))
	if len(files) != 1 {
		t.Fatalf("report files: %v, want one", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var f results.File
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range f.Cells {
		if c.Scenario != string(spec.ClockJump) {
			continue
		}
		found = true
		if c.Status != spec.NotApplicable || c.Expected != spec.NotApplicable {
			t.Errorf("ClockJump cell: status %s, expected %s; want not applicable", c.Status, c.Expected)
		}
		if !strings.Contains(strings.Join(c.Evidence, " "), clockReason) {
			t.Errorf("ClockJump cell's evidence %q does not give the reason %q", c.Evidence, clockReason)
		}
	}
	if !found {
		t.Fatalf("no ClockJump cell in %s", files[0])
	}
}
