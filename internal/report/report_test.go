package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

func cell(backend, scenario, property string, status, expected spec.Status, trials, violations int) results.Cell {
	return results.Cell{Backend: backend, Scenario: scenario, Property: property, Status: status,
		Expected: expected, Trials: trials, Violations: violations}
}

func sample() *Report {
	return &Report{Date: "2026-01-02T03:04:05Z", Machine: "test machine", Command: "dlock-lab compare --x", Trials: 3,
		Cells: []results.Cell{
			// Out of the suite's order on purpose: the matrix puts columns in order.
			cell("b", "Conformance", "Expiry", spec.Held, spec.Held, 1, 0),
			cell("a", "Conformance", "MutualExclusion", spec.Violated, spec.Violated, 1, 1),
			cell("a", "Conformance", "Expiry", spec.NotApplicable, spec.NotApplicable, 1, 0),
			cell("a", "HolderPause", "MutualExclusion", spec.Violated, spec.Violated, 3, 3),
			cell("a", "HolderCrash", "MutualExclusion", spec.Held, spec.Held, 3, 0),
			cell("b", "HolderCrash", "MutualExclusion", spec.Violated, spec.Held, 3, 1),
		}}
}

func TestMatricesOrder(t *testing.T) {
	ms := sample().matrices()
	if len(ms) != 2 {
		t.Fatalf("%d matrices, want conformance and faults", len(ms))
	}
	if got := strings.Join(ms[0].Cols, ","); got != "MutualExclusion,Expiry" {
		t.Errorf("conformance columns %s, want the suite's order MutualExclusion,Expiry", got)
	}
	if got := strings.Join(ms[1].Cols, ","); got != "HolderCrash,HolderPause" {
		t.Errorf("fault columns %s, want HolderCrash,HolderPause", got)
	}
	if got := strings.Join(ms[0].Rows, ","); got != "b,a" {
		t.Errorf("rows %s, want first-seen order b,a", got)
	}
}

func TestMarkdown(t *testing.T) {
	md := sample().Markdown()
	for _, want := range []string{
		"- Date: 2026-01-02T03:04:05Z", "- Command: `dlock-lab compare --x`",
		"| backend | MutualExclusion | Expiry |",
		"| a | ⚠️ violated | – |", "| b | – | ✅ |",
		"| backend | HolderCrash | HolderPause |",
		"| a | ✅ 3/3 | ⚠️ violated 3/3 |",
		"| b | ❌ violated 1/3 (declared: held) | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestSummaryNamesSurprises(t *testing.T) {
	var b strings.Builder
	r := sample()
	r.Failures = []string{"backends/x: TestFaults/HolderCrash"}
	r.WriteSummary(&b)
	out := b.String()
	for _, want := range []string{"!!violated", "weak 3/3", "!! b, HolderCrash / MutualExclusion: violated, declared held", "FAILED backends/x: TestFaults/HolderCrash"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if n := len(r.Surprises()); n != 1 {
		t.Errorf("%d surprises, want 1", n)
	}
	ok := &Report{Cells: sample().Cells[:5]}
	if n := len(ok.Surprises()); n != 0 {
		t.Errorf("%d surprises in a report without any", n)
	}
}

func TestHTMLSelfContained(t *testing.T) {
	r := sample()
	r.Speed = &Speed{Columns: []string{"p50"}, Rows: []SpeedRow{{Backend: "a", Values: []string{"1ms"}}},
		Latency:  []Latency{{Backend: "a", N: 10, P50: 1e6, P99: 3e6, Max: 5e6}, {Backend: "<b>", N: 10, P50: 2e3, P99: 5e3, Max: 9e3}},
		Handoffs: []Rate{{Backend: "a", Clients: 8, PerSecond: 1000}, {Backend: "m", Clients: 8, PerSecond: 1e6}, {Backend: "c", PerSecond: 10}}}
	page, err := r.HTML()
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	for _, bad := range []string{"http://", "https://", "src=", "@import", "url("} {
		// The SVG namespace is the one URL allowed: it is a name, never fetched.
		if strings.Contains(strings.ReplaceAll(html, `xmlns="http://www.w3.org/2000/svg"`, ""), bad) {
			t.Errorf("the page refers to something outside itself: %q", bad)
		}
	}
	for _, want := range []string{"<svg", `class="surprise"`, "off scale", "&lt;b&gt;", `data-rendered`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(html, "<b>") {
		t.Error("a backend name was not escaped")
	}
}

func TestFromDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := FromDir(dir); err == nil || !strings.Contains(err.Error(), "no report.json") {
		t.Fatalf("empty directory: %v, want an error that says what is missing", err)
	}
	// Cell files as conformance writes them.
	for name, cells := range map[string][]results.Cell{
		"conformance-a.json": sample().Cells[:3],
		"faults-a.json":      sample().Cells[3:],
	} {
		data, _ := json.Marshal(map[string]any{"cells": cells})
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cells) != len(sample().Cells) {
		t.Fatalf("%d cells, want %d", len(r.Cells), len(sample().Cells))
	}
	// A report.json, once written, is what FromDir reads.
	out := t.TempDir()
	r.Date = "written"
	if _, err := r.WriteFiles(out); err != nil {
		t.Fatal(err)
	}
	back, err := FromDir(out)
	if err != nil || back.Date != "written" || len(back.Cells) != len(r.Cells) {
		t.Fatalf("FromDir(report.json): %+v, %v", back, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "faults-bad.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromDir(dir); err == nil || !strings.Contains(err.Error(), "faults-bad.json") {
		t.Errorf("a broken cell file: %v, want an error naming it", err)
	}
}

// TestRunCellWinsOverNotApplicable: one backend run by two tests (each enabling some
// scenarios) shows the cells that ran, whichever file came last.
func TestRunCellWinsOverNotApplicable(t *testing.T) {
	for _, order := range [][2]spec.Status{{spec.NotApplicable, spec.Held}, {spec.Held, spec.NotApplicable}} {
		r := &Report{Cells: []results.Cell{
			cell("p", "Partition", "MutualExclusion", order[0], order[0], 3, 0),
			cell("p", "Partition", "MutualExclusion", order[1], order[1], 3, 0),
		}}
		ms := r.matrices()
		if got := ms[len(ms)-1].Cell[[2]string{"p", "Partition"}].Status; got != spec.Held {
			t.Errorf("cells %v: the matrix shows %s, want held", order, got)
		}
	}
}

// TestSometimesCells: what a cell says comes from its counts. A timing-dependent
// weakness seen in some exercised trials says "sometimes"; one seen in every trial,
// or in none, does not, whatever the declaration; trials that were not exercised are
// counted apart; a cell none of whose trials was exercised is a surprise.
func TestSometimesCells(t *testing.T) {
	notEx := cell("d", "Partition", "MutualExclusion", spec.NotExercised, spec.Held, 8, 0)
	notEx.Exercised = 0
	partly := cell("e", "Partition", "MutualExclusion", spec.Held, spec.Held, 8, 0)
	partly.Exercised = 6
	r := &Report{Trials: 8, Cells: []results.Cell{
		cell("a", "Partition", "MutualExclusion", spec.Violated, spec.Sometimes, 8, 3),
		cell("b", "Partition", "MutualExclusion", spec.Held, spec.Sometimes, 8, 0),
		cell("c", "Partition", "MutualExclusion", spec.Violated, spec.Sometimes, 8, 8),
		notEx, partly,
	}}
	if n := len(r.Surprises()); n != 1 {
		t.Errorf("%d surprises, want 1 (the cell none of whose trials was exercised): held and violated both agree with a Sometimes declaration", n)
	}
	md := r.Markdown()
	for _, want := range []string{"| a | ⚠️ violated 3/8 (sometimes) |", "| b | ✅ 8/8 |", "| c | ⚠️ violated 8/8 |",
		"| d | ❌ not exercised", "| e | ✅ 6/6 (+2 not exercised) |"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	if v := Verdict(r.Cells[2]); v != "violated 8/8" {
		t.Errorf("Verdict of a weakness seen in every trial: %q, want \"violated 8/8\" (never \"sometimes\")", v)
	}
	var b strings.Builder
	r.WriteSummary(&b)
	if out := b.String(); !strings.Contains(out, "weak 3/8") || strings.Contains(out, "ok?") {
		t.Errorf("summary lacks weak 3/8, or says ok?:\n%s", out)
	}
}
