package docgen

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/report"
)

// TestDocs: every generated region, cell and speed figure of the READMEs and docs/
// is what the committed report renders, every backticked scenario or property name
// exists, no verdict on a property or scenario goes without its cell marker, no
// sentence about every backend contradicts a cell, and no measured figure comes from
// anywhere but a marker or a dated older run (`dlock-lab docs --check` lists the
// same; `dlock-lab docs` rewrites the figures). Then, on copies of the documents with
// one thing changed each — a verdict, a figure, a region's line, a figure written by
// hand, a scope word, a verdict in a slash path, a verdict on a name without
// backticks — the same check must fail: the test can catch what it is for.
func TestDocs(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	path, err := CommittedReport(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := report.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	// The committed speed figures come from a quiet machine: the benchmarks started
	// below their load limit and were not forced.
	if r.Speed == nil || r.Speed.Load == nil || !r.Speed.Load.Quiet || r.Speed.Load.Forced {
		t.Errorf("%s: the speed figures were not measured on a quiet machine (speed load: %+v): run the benchmarks again with nothing else running", path, r.Speed)
	}
	// Every cell is bound to the code it tested, and none is stale.
	if u := Unbound(r); u > 0 {
		if r.Campaign != "" {
			t.Errorf("%s: %d cells carry no code stamp", path, u)
		} else {
			t.Logf("%s: a report older than the code stamps (%d cells unbound): staleness not checked", path, u)
		}
	}
	stale, err := Stale(root, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range StaleProblems(path, stale) {
		t.Error(p)
	}
	// Every violated cell links porcupine's visualization and a history, and they
	// are there; a cell whose links are taken away is caught.
	for _, p := range EvidenceProblems(path, r) {
		t.Error(p)
	}
	for i, c := range r.Cells {
		if c.Status != "violated" {
			continue
		}
		bare := *r
		bare.Cells = slices.Clone(r.Cells)
		bare.Cells[i].Visualizations = nil
		if len(EvidenceProblems(path, &bare)) == 0 {
			t.Errorf("a violated cell without its visualization (%s|%s) was not caught", c.Backend, c.Scenario)
		}
		break
	}
	r.MarkStale(stale)
	files, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Identifiers(root)
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		texts[rel] = string(b)
		for _, p := range Check(rel, string(b), r, ids) {
			t.Error(p)
		}
	}
	if t.Failed() {
		t.Log("run `go run -C lab ./cmd/dlock-lab docs` to render the figures from the committed report, and fix the prose it cannot")
		return
	}

	tradeoffs := texts[filepath.Join("docs", "tradeoffs.md")]
	for name, re := range map[string]*regexp.Regexp{
		"a verdict":       regexp.MustCompile(`(<!-- cell:[^|>]+\|[A-Za-z/]+ -->)(held|violated)`),
		"a figure":        regexp.MustCompile(`(<!-- speed:[^>]+ -->)([0-9])`),
		"a region's line": regexp.MustCompile(`(<!-- generated:matrix:faults -->\n\|)( backend)`),
	} {
		loc := re.FindStringSubmatchIndex(tradeoffs)
		if loc == nil {
			t.Fatalf("docs/tradeoffs.md has no %s to change", name)
		}
		bad := tradeoffs[:loc[4]] + "9" + tradeoffs[loc[4]:]
		if p := Check("copy of docs/tradeoffs.md", bad, r, ids); len(p) == 0 {
			t.Errorf("%s changed on a copy of docs/tradeoffs.md: not caught", name)
		}
	}

	// The prose rules, each on a copy of a document changed where a reader could
	// have been misled: each change must be caught by its rule, naming the scenario.
	for _, m := range []struct {
		what, file string
		re         *regexp.Regexp
		repl, rule string
		names      string // what the problem must name
	}{
		{"a wrong figure outside a marker", "docs/tradeoffs.md",
			regexp.MustCompile(`<!-- speed:[^>]+ -->([0-9.]+(?:µs|ms))<!-- /speed -->`), "9${1}", RuleFigure, ""},
		{"a wrong scope word", "docs/tradeoffs.md",
			regexp.MustCompile(`(A pause breaks a lease), whoever grants it`), "${1} on every backend", RuleScope, "HolderPause"},
		{"a verdict in a slash path", "docs/backends/redis.md",
			regexp.MustCompile("(`TestFaults/single/ServerRestart`): <!-- cell:redis\\|ServerRestart -->[^<]*<!-- /cell -->"), "${1}", RuleVerdict, "ServerRestart"},
		{"a verdict on a name without backticks", "docs/backends/redis.md",
			regexp.MustCompile("\\(`TestFaults/single/ClockJump`: <!-- cell:redis\\|ClockJump -->[^<]*<!-- /cell -->\\)"), "(ClockJump)", RuleVerdict, "ClockJump"},
	} {
		doc := texts[filepath.FromSlash(m.file)]
		loc := m.re.FindStringSubmatchIndex(doc)
		if loc == nil {
			t.Fatalf("%s has nothing to change for %s (%s)", m.file, m.what, m.re)
		}
		bad := doc[:loc[0]] + string(m.re.ExpandString(nil, m.repl, doc, loc)) + doc[loc[1]:]
		caught := false
		for _, p := range Check("copy of "+m.file, bad, r, ids) {
			caught = caught || p.Rule == m.rule && strings.Contains(p.What, m.names)
		}
		if !caught {
			t.Errorf("%s on a copy of %s (%q): not caught by the %s rule", m.what, m.file, m.re.ExpandString(nil, m.repl, doc, loc), m.rule)
		}
	}
}
