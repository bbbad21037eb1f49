package docgen

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dlock-go/dlock/internal/report"
)

// TestDocs: every generated region, cell and speed figure of the READMEs and docs/
// is what the committed report renders, every backticked scenario or property name
// exists, and no sentence states a verdict without a cell marker (`dlock docs
// --check` lists the same; `dlock docs` rewrites the figures). Then, on a copy of
// docs/tradeoffs.md with one verdict and one figure changed, the same check must
// fail: the test can catch what it is for.
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
		t.Log("run `go run ./cmd/dlock docs` to render the figures from the committed report, and fix the prose it cannot")
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
}
