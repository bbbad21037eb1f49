package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// replacePackages returns base with the test packages that rerun ran taken from
// rerun instead: base's cells and failures of those packages are dropped and
// rerun's put in their place (orderCells: each package's rows where they were), and a note says which packages were run again, when,
// on which commit and why (because). A rerun with benchmarks replaces the speed
// table (and the benchmarks' failures) too; otherwise it stays base's. A package is
// known by its cells' code stamp; a rerun cell without one is an error (nothing
// would bind it to the code it tested).
func replacePackages(base, rerun *report.Report, because string) (*report.Report, []string, error) {
	var pkgs, commits []string // the test packages rerun ran, the commits it ran on
	addCommit := func(c string) {
		if !slices.Contains(commits, c) {
			commits = append(commits, c)
		}
	}
	for _, c := range rerun.Cells {
		if c.Code == nil {
			if c.Status == spec.NotApplicable {
				continue
			}
			return nil, nil, fmt.Errorf("the rerun's cell %s/%s/%s carries no code stamp", c.Backend, c.Scenario, c.Property)
		}
		if !slices.Contains(pkgs, c.Code.Package) {
			pkgs = append(pkgs, c.Code.Package)
		}
		addCommit(c.Code.Commit)
	}
	var what []string
	if rerun.Speed != nil {
		if rerun.Speed.Code == nil {
			return nil, nil, fmt.Errorf("the rerun's speed table carries no code stamp")
		}
		addCommit(rerun.Speed.Code.Commit)
		what = append(what, "the speed table ("+rerun.Speed.Code.Package+")")
	}
	if len(pkgs) == 0 && rerun.Speed == nil {
		return nil, nil, fmt.Errorf("the rerun has no cell and no speed table to put in")
	}
	// A rerun of the benchmarks alone ran no trial: only its campaign must match.
	if rerun.Campaign != base.Campaign || (len(rerun.Cells) > 0 && rerun.Trials != base.Trials) {
		return nil, nil, fmt.Errorf("the rerun is a %s campaign of %d trials, the report a %s one of %d: they do not mix",
			rerun.Campaign, rerun.Trials, base.Campaign, base.Trials)
	}
	slices.Sort(pkgs)
	if len(pkgs) > 0 {
		what = append(what, "the cells of "+strings.Join(pkgs, ", "))
	}
	// A failure names its package relative to its module ("peers/getlockpeer: …"),
	// a code stamp relative to the repository ("lab/peers/getlockpeer"); the
	// benchmarks' failures start with "benchmarks: ".
	replaced := func(failure string) bool {
		f := strings.TrimPrefix(failure, "./")
		if rerun.Speed != nil && strings.HasPrefix(f, "benchmarks: ") {
			return true
		}
		return slices.ContainsFunc(pkgs, func(p string) bool {
			return strings.HasPrefix(f, p+": ") || strings.HasPrefix(f, strings.TrimPrefix(p, "lab/")+": ")
		})
	}
	out := *base
	if rerun.Speed != nil {
		out.Speed = rerun.Speed
	}
	out.Cells = nil
	for _, c := range base.Cells {
		if c.Code == nil || !slices.Contains(pkgs, c.Code.Package) {
			out.Cells = append(out.Cells, c)
		}
	}
	out.Cells = append(out.Cells, rerun.Cells...)
	orderCells(out.Cells, base.Cells)
	out.Failures = slices.DeleteFunc(slices.Clone(base.Failures), replaced)
	out.Failures = append(out.Failures, rerun.Failures...)
	out.Notes = slices.DeleteFunc(slices.Clone(base.Notes), func(n string) bool { return superseded(n, pkgs, rerun.Speed != nil) })
	out.Notes = append(out.Notes, rerun.Notes...)
	out.Notes = append(out.Notes, fmt.Sprintf("%s%s (%s, %s, commit %s): %s",
		strings.Join(what, " and "), fromRerun, rerun.Date, rerun.Command, strings.Join(commits, ", "), because))
	return &out, pkgs, nil
}

// orderCells sorts cells (stably) by their test package: the packages of the
// campaign's targets in the campaign's order, then the others in the order they
// first appear in base, then in cells. So a package's rows keep their place in the
// report's tables however many times it was replaced.
func orderCells(cells, base []results.Cell) {
	rank := map[string]int{}
	for _, t := range targets {
		rank[path.Join(t.Dir, t.Pkg)] = len(rank)
	}
	for _, cs := range [][]results.Cell{base, cells} {
		for _, c := range cs {
			if p := cellPackage(c); p != "" {
				if _, ok := rank[p]; !ok {
					rank[p] = len(rank)
				}
			}
		}
	}
	// A cell without a code stamp (not applicable) stays with the cell before it.
	keys := make([]int, len(cells))
	last := -1
	for i, c := range cells {
		if p := cellPackage(c); p != "" {
			last = rank[p]
		}
		keys[i] = last
	}
	idx := make([]int, len(cells))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return keys[a] - keys[b] })
	sorted := make([]results.Cell, len(cells))
	for i, j := range idx {
		sorted[i] = cells[j]
	}
	copy(cells, sorted)
}

// cellPackage is the test package of c's code stamp, or "".
func cellPackage(c results.Cell) string {
	if c.Code == nil {
		return ""
	}
	return c.Code.Package
}

// fromRerun follows what a replacement note says came from a second run.
const fromRerun = ": from a second run"

// superseded tells whether note, written by an earlier replacement, speaks only of
// what this one replaces (the cells of pkgs, the speed table if speed): its run
// is no longer in the report, and the new note takes its place.
func superseded(note string, pkgs []string, speed bool) bool {
	what, _, ok := strings.Cut(note, fromRerun+" (")
	if !ok {
		return false
	}
	for _, part := range strings.Split(what, " and ") {
		if strings.HasPrefix(part, "the speed table (") {
			if !speed {
				return false
			}
			continue
		}
		list, ok := strings.CutPrefix(part, "the cells of ")
		if !ok {
			return false
		}
		for _, p := range strings.Split(list, ", ") {
			if !slices.Contains(pkgs, p) {
				return false
			}
		}
	}
	return true
}

// copyRun copies the files a run keeps beside its report — its cells/ and logs/
// directories (histories included) — from dir into out, replacing what out had
// under the same names.
func copyRun(dir, out string) error {
	for _, sub := range []string{"cells", "logs"} {
		root := filepath.Join(dir, sub)
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && path == root {
					return nil
				}
				return err
			}
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			target := filepath.Join(out, rel)
			if d.IsDir() {
				if filepath.Dir(path) == root { // a run's own directory: replaced whole
					if err := os.RemoveAll(target); err != nil {
						return err
					}
				}
				return os.MkdirAll(target, 0o755)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
