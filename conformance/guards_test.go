package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// acceptAll is a broken guard: it accepts every token.
type acceptAll struct{}

func (acceptAll) Check(context.Context, string, uint64, string) error { return nil }

// storeDown is a guard whose store does not answer.
type storeDown struct{}

func (storeDown) Check(context.Context, string, uint64, string) error {
	return errors.New("dial tcp 127.0.0.1:1: connection refused")
}

// guardHarness offers the guards of TestGuardCells.
type guardHarness struct{ Harness }

func (guardHarness) FenceGuards(testing.TB) []FenceGuard {
	return []FenceGuard{{"memory", fence.NewMemory()}, {"accept-all", acceptAll{}}, {"down", storeDown{}}}
}

// TestGuardCells: the fencing guards of a FenceGuarder decide a paused holder's
// late write beside the suite's resource, each in a cell of its own judged from the
// same history: a guard that keeps the rule holds, one that accepts the stale
// token is caught (the fencing rule, the overlap), one whose store fails is not
// exercised, and the suite's own cell is judged on its resource alone.
func TestGuardCells(t *testing.T) {
	f := &faults{h: guardHarness{}, backend: "mem", caps: spec.Capabilities{Fencing: true}}
	main := &results.Cell{Backend: "mem", Scenario: string(spec.HolderPauseFenced)}
	r := newCellRun(t, main, 2)
	guards := f.guardRuns(t, r, spec.HolderPauseFenced, string(spec.MutualExclusion))
	for i := range r.trials() {
		res := newGuardedResource(r.rec, key(t, "late"), guards)
		res.Enter("new-holder", uint64(10*i+5))
		if res.Enter("paused-holder", uint64(10*i+4)) {
			t.Fatal("the suite's resource accepted the stale token")
		}
		res.Leave("new-holder")
		r.judge(claims{resource: true, recipe: true, exercised: lateWriteReached("")})
		judgeGuards(r, guards, func(g string) claims {
			return claims{resource: true, recipe: true, guard: g, exercised: lateWriteReached(g)}
		})
	}
	if st := cellStatus(main); st != spec.Held || main.Exercised != 2 {
		t.Errorf("the suite's cell: %s (%d exercised), %v", st, main.Exercised, main.Evidence)
	}
	want := map[string]spec.Status{"memory": spec.Held, "accept-all": spec.Violated, "down": spec.NotExercised}
	for _, g := range guards {
		c := g.c
		if st := cellStatus(c); st != want[g.g.Name] {
			t.Errorf("%s: %s, want %s; %v", c.Backend, st, want[g.g.Name], c.Evidence)
		}
		if c.Backend != "mem (guard "+g.g.Name+")" || c.Expected != spec.Held || c.Scenario != string(spec.HolderPauseFenced) {
			t.Errorf("cell %+v", *c)
		}
		ev := strings.Join(c.Evidence, "\n")
		switch g.g.Name {
		case "accept-all":
			if !strings.Contains(ev, "fencing rule") || !strings.Contains(ev, "paused-holder (token 4) entered") {
				t.Errorf("accept-all's evidence: %s", ev)
			}
		case "down":
			if !strings.Contains(ev, "could not decide") || !strings.Contains(ev, "connection refused") {
				t.Errorf("down's evidence: %s", ev)
			}
		}
	}
}

func TestGuardedBackend(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"redis", "redisfence"}:                "redis (guard redisfence)",
		{"redis (master+replica)", "sqlfence"}: "redis (master+replica, guard sqlfence)",
	} {
		if got := guardedBackend(in[0], in[1]); got != want {
			t.Errorf("guardedBackend(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}
