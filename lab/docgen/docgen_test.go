package docgen

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/lab/internal/codehash"
	"github.com/dlock-go/dlock/spec"
)

func sample() *report.Report {
	return &report.Report{Date: "2026-12-03", Machine: "test", Trials: 20, Cells: []results.Cell{
		{Backend: "redis", Scenario: "Conformance", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 1},
		{Backend: "redis", Scenario: "ServerRestart", Property: "MutualExclusion", Status: spec.Violated, Expected: spec.Violated, Trials: 20, Violations: 20},
		{Backend: "redis (appendfsync always)", Scenario: "ServerRestart", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 20},
		{Backend: "zk", Scenario: "Partition", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 20, Margin: 1800e6},
	}}
}

// TestUpdateThenCheck: a document rendered by Update passes Check.
func TestUpdateThenCheck(t *testing.T) {
	doc := "# Doc\n\n<!-- generated:matrix:faults -->\n<!-- /generated:matrix:faults -->\n\n" +
		"A restart of Redis without persistence: <!-- cell:redis|ServerRestart -->?<!-- /cell -->; " +
		"with appendfsync always: <!-- cell:redis (appendfsync always)|ServerRestart -->?<!-- /cell -->.\n\n" +
		"A cut-off ZooKeeper holder's lease ends <!-- cell:zk|Partition|margin -->?<!-- /cell --> before the next grant.\n\n" +
		"<!-- generated:readme-backends -->\n<!-- /generated:readme-backends -->\n"
	r := sample()
	out, err := Update(doc, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"violated 20/20<!-- /cell -->", "held 20/20<!-- /cell -->", ">1.8s<", "| redis |", "✅ `ServerRestart` (appendfsync always)"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered document lacks %q:\n%s", want, out)
		}
	}
	if p := Check("doc.md", out, r, nil); len(p) > 0 {
		t.Errorf("a freshly rendered document: %v", p)
	}
}

// TestCheckCatchesDisagreement: a wrong verdict, a wrong figure, an edited region, an
// unknown scenario name and a verdict stated without a cell marker are each caught.
func TestCheckCatchesDisagreement(t *testing.T) {
	r := sample()
	good, err := Update("<!-- generated:matrix:faults -->\n<!-- /generated:matrix:faults -->\n\n"+
		"Restart: <!-- cell:redis|ServerRestart -->x<!-- /cell -->. Margin <!-- cell:zk|Partition|margin -->x<!-- /cell -->.\n", r)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"wrong verdict": strings.Replace(good, "violated 20/20", "held 20/20", 1),
		"wrong figure":  strings.Replace(good, ">1.8s<", ">1.2s<", 1),
		"edited region": strings.Replace(good, "20/20 |", "19/20 |", 1),
		"unknown name":  good + "\nThe `ServerReboot` scenario.\n",
		"bare verdict":  good + "\nRedis loses its locks in `ServerRestart`: violated every time.\n",
		"missing cell":  good + "\n<!-- cell:redis|Failover -->held<!-- /cell -->\n",
	} {
		if p := Check("doc.md", bad, r, map[string]bool{}); len(p) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// TestProseRules: each prose rule catches what it is for, and lets pass what it
// exempts.
func TestProseRules(t *testing.T) {
	r := sample()
	r.Cells = append(r.Cells,
		results.Cell{Backend: "zk", Scenario: "ServerRestart", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 20},
		results.Cell{Backend: "zk (3-node ensemble)", Scenario: "ServerRestart", Property: "MutualExclusion", Status: spec.NotApplicable, Expected: spec.NotApplicable},
		results.Cell{Backend: "redis", Scenario: "Conformance", Property: "FIFO", Status: spec.NotApplicable, Expected: spec.NotApplicable},
		results.Cell{Backend: "zk", Scenario: "Conformance", Property: "FIFO", Status: spec.Held, Expected: spec.Held, Trials: 1},
		results.Cell{Backend: "zk", Scenario: "Conformance", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 1},
	)
	restart := "<!-- cell:redis|ServerRestart -->violated 20/20<!-- /cell -->"
	zkRestart := "<!-- cell:zk|ServerRestart -->held 20/20<!-- /cell -->"
	for _, tc := range []struct {
		name, doc string
		rule      string // "" passes
	}{
		{"verdict with its marker", "Redis loses its locks (`ServerRestart`: " + restart + ").", ""},
		{"verdict in a slash path", "`TestFaults/single/ServerRestart` is violated on redis.", RuleVerdict},
		{"verdict in a path without backticks", "Conformance/FIFO holds on zk.", RuleVerdict},
		{"verdict on a bare name", "A ServerRestart breaks the Redis lock.", RuleVerdict},
		{"verdict word beyond the old three", "Redis frees nothing in `ServerRestart`.", RuleVerdict},
		{"a marker for another name", "ZooKeeper survives `ServerRestart` and `Partition`: " + zkRestart + ".", RuleVerdict},
		{"a single word is a word", "Waiters are served in FIFO order and the lock is held.", ""},
		{"a requirement", "**ServerRestart**: every server restarts while a lock is held.", ""},
		{"a condition", "`ServerRestart` checks whether the lock is kept.", ""},
		{"scope word, cells disagree", "`ServerRestart` holds on every backend (" + zkRestart + ", " + restart + ").", RuleScope},
		{"scope word, wrong verdict", "`MutualExclusion` is violated on all backends (<!-- cell:zk|Conformance/MutualExclusion -->held 1/1<!-- /cell --> <!-- cell:redis|Conformance/MutualExclusion -->held 1/1<!-- /cell -->).", RuleScope},
		{"scope word, true", "`MutualExclusion` holds on every backend (<!-- cell:zk|Conformance/MutualExclusion -->held 1/1<!-- /cell --> <!-- cell:redis|Conformance/MutualExclusion -->held 1/1<!-- /cell -->).", ""},
		{"scope word, not applicable", "`FIFO` holds on every backend (<!-- cell:zk|Conformance/FIFO -->held 1/1<!-- /cell -->).", RuleScope},
		{"a configuration's not applicable", "`Partition` holds on every backend (<!-- cell:zk|Partition -->held 20/20<!-- /cell -->).", ""},
		{"a figure by hand", "Redis hands off 3446 times a second.", RuleFigure},
		{"a duration by hand", "The lease ended after about 988 ms.", RuleFigure},
		{"a ratio by hand", "It costs 1.26× the raw round trips.", RuleFigure},
		{"a count by hand", "It held in 20/20 trials.", RuleFigure},
		{"a bare figure in backticks", "It took `988 ms`.", RuleFigure},
		{"a figure from a marker", "Its margin: <!-- cell:zk|Partition|margin -->1.8s<!-- /cell -->.", ""},
		{"a setting", "With a 2 s TTL, every 1–8 ms, TTL×1% + 2 ms, 3 of 5 masters, `wait_timeout=100ms`.", ""},
		{"a version, a port, a setup", "redis-server 7.0.15 on port 6379 with 64 clients and 5 masters.", ""},
		{"a dated section", "## An older run (2026-12-02, a3d8d68)\n\nThe lease ended after about 988 ms.\n\n## Now\n\nNothing measured.", ""},
		{"after a dated section", "## An older run (2026-12-02, a3d8d68)\n\nFine.\n\n## Now\n\nIt took 988 ms.", RuleFigure},
		{"code", "```\nBenchmarkX 5000 988 ms 1.26×\n```\n", ""},
	} {
		doc, err := Update(tc.doc+"\n", r)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var rules []string
		for _, p := range Check("doc.md", doc, r, map[string]bool{}) {
			rules = append(rules, p.Rule+": "+p.What)
		}
		switch {
		case tc.rule == "" && len(rules) > 0:
			t.Errorf("%s: %q: %v", tc.name, tc.doc, rules)
		case tc.rule != "" && !slices.ContainsFunc(rules, func(s string) bool { return strings.HasPrefix(s, tc.rule+":") }):
			t.Errorf("%s: %q: no %s problem, got %v", tc.name, tc.doc, tc.rule, rules)
		}
	}
}

// TestStale: a cell whose code stamp differs from the tree's code is stale, and its
// verdict says so with the commit it ran on; one whose stamp matches is not.
func TestStale(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	now, err := codehash.Of(root, "./backends/memlock")
	if err != nil {
		t.Fatal(err)
	}
	r := &report.Report{Campaign: "full", Cells: []results.Cell{
		{Backend: "mem", Scenario: "Conformance", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 1, Exercised: 1,
			Code: &results.Code{Commit: "0123abcd", Hash: now, Package: "backends/memlock"}},
		{Backend: "redis", Scenario: "Conformance", Property: "MutualExclusion", Status: spec.Held, Expected: spec.Held, Trials: 1, Exercised: 1,
			Code: &results.Code{Commit: "0123abcd", Hash: "not-the-code", Package: "backends/redislock"}},
	}}
	stale, err := Stale(root, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 || stale["backends/redislock"] != "0123abcd" {
		t.Fatalf("stale %v, want backends/redislock (ran on 0123abcd) alone", stale)
	}
	r.MarkStale(stale)
	if v := report.Verdict(r.Cells[1]); !strings.Contains(v, "stale: ran on 0123abcd") {
		t.Errorf("a stale cell's verdict %q does not say so", v)
	}
	if v := report.Verdict(r.Cells[0]); strings.Contains(v, "stale") {
		t.Errorf("a current cell's verdict %q says stale", v)
	}
}

// TestTargetsRegion: targets:SUBJECT renders the targets about that subject only.
func TestTargetsRegion(t *testing.T) {
	r := sample()
	r.Speed = &report.Speed{Targets: []report.Target{
		{Claim: "redis ≤ 1.1× raw SET NX PX + DEL (uncontended p50)", Value: 1.2, Limit: 1.1, AtMost: true},
		{Claim: "redis fifo: longest wait ≤ 10× mean wait (8 clients)", Value: 4, Limit: 10, AtMost: true, Met: true},
		{Claim: "redlock(5) ≤ 1.05× the raw parallel fan-out (uncontended p50)", Value: 1.1, Limit: 1.05, AtMost: true},
	}}
	for name, want := range map[string][]string{
		"targets:redis":            {"redis ≤ 1.1×"},
		"targets:redis-fifo":       {"redis fifo:"},
		"targets:redis,redlock(5)": {"redis ≤ 1.1×", "redlock(5) ≤"},
	} {
		out, err := Render(name, r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := strings.Count(out, "\n| "); n != len(want) {
			t.Errorf("%s: %d rows, want %d:\n%s", name, n, len(want), out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q:\n%s", name, w, out)
			}
		}
	}
	if _, err := Render("targets:zk", r); err == nil {
		t.Error("targets of a subject without targets: no error")
	}
}
