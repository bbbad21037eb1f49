package conformance

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// The fencing guards of a FenceGuarder harness decide the writes of the fenced
// scenarios beside the suite's resource: each guard's decisions make a cell of
// their own, judged from the same trials (the same recorder and histories).

// guardRun is one guard's cell in a scenario.
type guardRun struct {
	g   FenceGuard
	c   *results.Cell
	run *cellRun
}

// guardRuns returns a run per guard the harness offers for scenario s (whose cells
// are about property), or none when the harness offers none.
func (f *faults) guardRuns(t *testing.T, r *cellRun, s spec.Scenario, property string) []guardRun {
	fg, ok := f.h.(FenceGuarder)
	if !ok {
		return nil
	}
	var out []guardRun
	for _, g := range fg.FenceGuards(t) {
		c := &results.Cell{Backend: guardedBackend(f.backend, g.Name), Scenario: string(s), Property: property, Expected: f.caps.Expect(s)}
		run := newCellRun(t, c, r.want)
		run.rec = r.rec // one trial, a fact per guard: the same history
		out = append(out, guardRun{g: g, c: c, run: run})
	}
	return out
}

// guardedBackend is the name of backend's cells decided by the guard named guard:
// "redis (guard redisfence)", "redis (master+replica, guard redisfence)".
func guardedBackend(backend, guard string) string {
	if strings.HasSuffix(backend, ")") {
		return backend[:len(backend)-1] + ", guard " + guard + ")"
	}
	return backend + " (guard " + guard + ")"
}

// judgeGuards judges r's current trial once per guard, with the claims cl makes
// about the guard's resource.
func judgeGuards(r *cellRun, runs []guardRun, cl func(guard string) claims) {
	for _, g := range runs {
		g.run.i, g.run.cur = r.i, r.cur
		g.run.judge(cl(g.g.Name))
	}
}

// addGuardCells files the guards' cells; a cell whose outcome differs from what
// the declaration expects fails t, as RunFaults fails the scenario's own.
func (f *faults) addGuardCells(t *testing.T, runs []guardRun) {
	for _, g := range runs {
		c := g.c
		if c.Status == "" {
			c.Status = cellStatus(c)
		}
		f.add(*c)
		if c.Surprise() {
			t.Errorf("%s on %s: %s, but the backend's capabilities expect %s; evidence: %v", c.Scenario, c.Backend, c.ShortStatus(), c.Expected, c.Evidence)
		} else {
			t.Logf("%s on %s: %s as expected; %v", c.Scenario, c.Backend, c.ShortStatus(), c.Evidence)
		}
	}
}

// guardDecided is cond, for the resource named res, unless res is a guard that
// could not decide an entry of the trial (its store failed): then the trial is not
// exercised, for that guard — its decisions would be judged with one missing.
func guardDecided(res string, cond func(v *view) (bool, string)) func(v *view) (bool, string) {
	return func(v *view) (bool, string) {
		for _, e := range v.events {
			if res != "" && e.Op == OpNote && strings.HasPrefix(e.Note, "guard "+res+" could not decide") {
				return false, e.Note
			}
		}
		return cond(v)
	}
}
