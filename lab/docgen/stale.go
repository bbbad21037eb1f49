package docgen

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/lab/internal/codehash"
)

// Stale returns the packages of r's cells (and of its speed table) whose code in the
// checkout at root differs from the code they ran on, each with the commit it ran on:
// their cells vouch for code that has changed since. A report whose cells carry no
// code stamp (older than the stamps) is reported by Unbound instead.
func Stale(root string, r *report.Report) (map[string]string, error) {
	ran := map[string][2]string{} // package → hash, commit
	for _, c := range r.Cells {
		if c.Code != nil {
			ran[c.Code.Package] = [2]string{c.Code.Hash, c.Code.Commit}
		}
	}
	if r.Speed != nil && r.Speed.Code != nil {
		ran[r.Speed.Code.Package] = [2]string{r.Speed.Code.Hash, r.Speed.Code.Commit}
	}
	stale := map[string]string{}
	for pkg, hc := range ran {
		dir, rel := root, pkg
		if p, ok := strings.CutPrefix(pkg, "lab/"); ok { // the lab is a module of its own
			dir, rel = filepath.Join(root, "lab"), p
		}
		now, err := codehash.Of(dir, "./"+rel)
		if err != nil {
			return nil, fmt.Errorf("docgen: the code of %s: %w", pkg, err)
		}
		if now != hc[0] {
			stale[pkg] = hc[1]
		}
	}
	return stale, nil
}

// Unbound counts r's cells that carry no code stamp (other than not applicable
// ones, which test nothing).
func Unbound(r *report.Report) int {
	n := 0
	for _, c := range r.Cells {
		if c.Code == nil && c.Status != "not applicable" {
			n++
		}
	}
	return n
}

// StaleProblems lists, as problems of the report at path, its stale packages.
func StaleProblems(path string, stale map[string]string) []Problem {
	pkgs := make([]string, 0, len(stale))
	for p := range stale {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	var out []Problem
	for _, p := range pkgs {
		out = append(out, Problem{File: path, What: fmt.Sprintf("stale: the cells of %s ran on %s, and its code has changed since (run the campaign again)", p, stale[p])})
	}
	return out
}

// EvidenceProblems lists, as problems of the report at path, the violated cells
// that do not link porcupine's visualization and a recorded history, or whose
// linked files are not in the report's directory: a reader who sees ⚠️ must be able
// to open what was seen.
func EvidenceProblems(path string, r *report.Report) []Problem {
	dir := filepath.Dir(path)
	var out []Problem
	for _, c := range r.Cells {
		if c.Status != "violated" {
			continue
		}
		cell := fmt.Sprintf("%s|%s|%s", c.Backend, c.Scenario, c.Property)
		if len(c.Visualizations) == 0 {
			out = append(out, Problem{File: path, What: fmt.Sprintf("violated cell %s links no visualization of its history", cell)})
		}
		if len(c.Histories) == 0 {
			out = append(out, Problem{File: path, What: fmt.Sprintf("violated cell %s links no recorded history", cell)})
		}
		for _, f := range append(slices.Clone(c.Visualizations), c.Histories...) {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				out = append(out, Problem{File: path, What: fmt.Sprintf("violated cell %s links %s: %v", cell, f, err)})
			}
		}
	}
	return out
}
