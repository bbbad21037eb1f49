package docgen

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
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
