package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// TestReplacePackages: a second run's packages take the place of the first run's —
// cells and failures — and the rest of the first run stays; the report says so.
func TestReplacePackages(t *testing.T) {
	cell := func(pkg, prop, status string) results.Cell {
		return results.Cell{Backend: pkg, Scenario: "Conformance", Property: prop, Status: spec.Status(status),
			Code: &results.Code{Package: "backends/" + pkg, Commit: "c-" + pkg, Hash: "h"}}
	}
	peer := cell("p", "P", "failed")
	peer.Code.Package = "lab/peers/p" // the lab's packages: a failure names them from the lab module
	base := &report.Report{Campaign: "full", Trials: 20, Speed: &report.Speed{Columns: []string{"x"}},
		Cells:    []results.Cell{cell("a", "P", "failed"), cell("a", "Q", "held"), cell("b", "P", "held"), peer},
		Failures: []string{"backends/a: TestConformance/P", "backends/b: TestFaults/single/X", "peers/p: TestConformance/P"}}
	peerAgain := cell("p", "P", "held")
	peerAgain.Code.Package = "lab/peers/p"
	again := &report.Report{Campaign: "full", Trials: 20, Date: "D", Command: "C",
		Cells: []results.Cell{cell("a", "P", "held"), cell("a", "Q", "held"), peerAgain}}
	got, pkgs, err := replacePackages(base, again, "the harness ran out of connections")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pkgs, " ") != "backends/a lab/peers/p" {
		t.Errorf("packages replaced: %v, want [backends/a lab/peers/p]", pkgs)
	}
	var cells []string
	for _, c := range got.Cells {
		cells = append(cells, c.Backend+"/"+c.Property+"="+string(c.Status))
	}
	if strings.Join(cells, " ") != "a/P=held a/Q=held b/P=held p/P=held" {
		t.Errorf("cells: %v, want the second run's in the first run's place", cells)
	}
	if len(got.Failures) != 1 || got.Failures[0] != "backends/b: TestFaults/single/X" {
		t.Errorf("failures: %v, want only b's", got.Failures)
	}
	if got.Speed != base.Speed {
		t.Error("the speed table is not the first run's")
	}
	if n := got.Notes[len(got.Notes)-1]; !strings.Contains(n, "backends/a") || !strings.Contains(n, "c-a") || !strings.Contains(n, "out of connections") {
		t.Errorf("note: %q", n)
	}
	// A second replacement of the same packages drops the first one's note (its run
	// is no longer in the report) and keeps the notes about other packages.
	got.Notes = append([]string{"the cells of backends/b: from a second run (D0, C0, commit c0): y", "an unrelated note"}, got.Notes...)
	twice, _, err := replacePackages(got, again, "a fix")
	if err != nil {
		t.Fatal(err)
	}
	if len(twice.Notes) != 3 || twice.Notes[0] != got.Notes[0] || twice.Notes[1] != got.Notes[1] || !strings.HasSuffix(twice.Notes[2], ": a fix") {
		t.Errorf("notes after a second replacement: %q", twice.Notes)
	}
	if len(base.Cells) != 4 || len(base.Failures) != 3 {
		t.Error("the first run's report was changed in place")
	}

	unstamped := &report.Report{Campaign: "full", Trials: 20, Cells: []results.Cell{{Backend: "a", Status: spec.Held}}}
	if _, _, err := replacePackages(base, unstamped, "x"); err == nil {
		t.Error("a rerun cell without a code stamp was taken")
	}
	quick := &report.Report{Campaign: "quick", Trials: 2, Cells: again.Cells}
	if _, _, err := replacePackages(base, quick, "x"); err == nil {
		t.Error("a quick rerun was mixed into a full report")
	}
}

// TestCopyRun: a rerun's directories under cells/ replace the first run's of the
// same name whole (no history of the first run left beside the second's), its logs
// overwrite theirs, and the others stay.
func TestCopyRun(t *testing.T) {
	out, again := t.TempDir(), t.TempDir()
	write := func(dir, rel, s string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(out, "cells/a/old.json", "old")
	write(out, "cells/a/histories/h0.jsonl", "old")
	write(out, "cells/b/b.json", "b")
	write(out, "logs/a.log", "old")
	write(out, "logs/b.log", "b")
	write(again, "cells/a/new.json", "new")
	write(again, "cells/a/histories/h1.jsonl", "new")
	write(again, "logs/a.log", "new")
	if err := copyRun(again, out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cells/a/new.json": "new", "cells/a/histories/h1.jsonl": "new", "cells/b/b.json": "b",
		"logs/a.log": "new", "logs/b.log": "b"}
	for rel, s := range want {
		if data, err := os.ReadFile(filepath.Join(out, rel)); err != nil || string(data) != s {
			t.Errorf("%s: %q, %v; want %q", rel, data, err, s)
		}
	}
	for _, rel := range []string{"cells/a/old.json", "cells/a/histories/h0.jsonl"} {
		if _, err := os.Stat(filepath.Join(out, rel)); err == nil {
			t.Errorf("%s of the first run is still there", rel)
		}
	}
}

// TestReplaceSpeed: a rerun of the benchmarks alone puts its speed table (and its
// failures) in place of the first run's and leaves every cell.
func TestReplaceSpeed(t *testing.T) {
	old := &report.Speed{Columns: []string{"old"}, Code: &results.Code{Package: "lab/bench", Commit: "c1"}}
	base := &report.Report{Campaign: "full", Trials: 20, Speed: old,
		Cells:    []results.Cell{{Backend: "a", Status: spec.Held, Code: &results.Code{Package: "backends/a"}}},
		Failures: []string{"benchmarks: too slow", "backends/a: TestX"}}
	// A rerun of the benchmarks alone ran no trial.
	again := &report.Report{Campaign: "full", Speed: &report.Speed{Columns: []string{"new"}, Code: &results.Code{Package: "lab/bench", Commit: "c2"}}}
	got, _, err := replacePackages(base, again, "the bench's code changed")
	if err != nil {
		t.Fatal(err)
	}
	if got.Speed != again.Speed || len(got.Cells) != 1 {
		t.Errorf("speed %v, %d cells; want the rerun's speed and the first run's cell", got.Speed.Columns, len(got.Cells))
	}
	if len(got.Failures) != 1 || got.Failures[0] != "backends/a: TestX" {
		t.Errorf("failures: %v", got.Failures)
	}
	if n := got.Notes[len(got.Notes)-1]; !strings.HasPrefix(n, "the speed table (lab/bench): from a second run") || !strings.Contains(n, "c2") {
		t.Errorf("note: %q", n)
	}
	// The benchmarks again: the note of the first replacement goes, a note about
	// cells stays.
	got.Notes = append([]string{"the cells of backends/a: from a second run (D, C, commit c): z"}, got.Notes...)
	twice, _, err := replacePackages(got, again, "quiet this time")
	if err != nil {
		t.Fatal(err)
	}
	if len(twice.Notes) != 2 || !strings.HasPrefix(twice.Notes[0], "the cells of backends/a") || !strings.HasSuffix(twice.Notes[1], "quiet this time") {
		t.Errorf("notes after a second replacement of the speed table: %q", twice.Notes)
	}
	again.Speed.Code = nil
	if _, _, err := replacePackages(base, again, "x"); err == nil {
		t.Error("a speed table without a code stamp was taken")
	}
}

// TestOrderCells: the campaign's packages come in the campaign's order (mem before
// postgres before the peers), others after them in the order the first run had
// them, and a cell without a code stamp stays with the cell before it.
func TestOrderCells(t *testing.T) {
	cell := func(backend, pkg string) results.Cell {
		c := results.Cell{Backend: backend}
		if pkg != "" {
			c.Code = &results.Code{Package: pkg}
		}
		return c
	}
	base := []results.Cell{cell("x", "backends/x"), cell("postgres", "backends/pglock")}
	cells := []results.Cell{cell("postgres", "backends/pglock"), cell("bsm", "lab/peers/bsmpeer"), cell("bsm", ""),
		cell("x", "backends/x"), cell("mem", "backends/memlock"), cell("mem", "")}
	orderCells(cells, base)
	var got []string
	for _, c := range cells {
		got = append(got, c.Backend)
	}
	if strings.Join(got, " ") != "mem mem postgres bsm bsm x" {
		t.Errorf("order: %v, want mem mem postgres bsm bsm x", got)
	}
}
