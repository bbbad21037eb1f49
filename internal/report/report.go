// Package report merges what `dlock-lab compare` measures — the conformance and fault
// cells that conformance.Run and conformance.RunFaults save as JSON, and the speed
// numbers of the benchmarks — into one Report, and renders it as JSON, Markdown, a
// plain-text summary for a terminal, and a self-contained HTML page with inline SVG
// charts (no scripts, styles or fonts fetched from anywhere).
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// Report is everything one `dlock-lab compare` run found.
type Report struct {
	Date    string `json:"date"`    // when the run started (RFC 3339)
	Machine string `json:"machine"` // OS/arch, CPUs, CPU model, Go version
	Command string `json:"command"` // how to reproduce the run
	Trials  int    `json:"trials"`  // exercised trials asked per fault scenario
	// Campaign is "full" (the committed reports: 20 exercised trials a fault cell)
	// or "quick" (few trials, minutes); empty in reports older than the choice.
	Campaign string `json:"campaign,omitempty"`
	// Cells: backend × scenario × property outcomes. Conformance cells have scenario
	// "Conformance"; fault cells name their scenario and the property it threatens.
	Cells []results.Cell `json:"cells"`
	Speed *Speed         `json:"speed,omitempty"`
	// Failures: tests that failed while the report was made (surprises included),
	// e.g. "backends/redislock: TestFaults/single/ClockJump".
	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// Speed is the benchmark part of a report. Only ratios within one report mean
// something: absolute numbers depend on the machine and its load.
type Speed struct {
	// Columns and Rows form the speed table (one row per backend, values rendered).
	Columns []string   `json:"columns"`
	Rows    []SpeedRow `json:"rows"`
	// Latency: the uncontended acquire+release latency of each backend.
	Latency []Latency `json:"latency,omitempty"`
	// Handoffs: contended hand-offs per second of each backend.
	Handoffs []Rate `json:"handoffs,omitempty"`
	// Scaling: contended hand-offs/s and store requests per hand-off of each
	// backend with more and more waiters on one key.
	Scaling []ScalePoint `json:"scaling,omitempty"`
	// Targets: the speed targets, each a ratio measured in this run.
	Targets []Target `json:"targets,omitempty"`
	// Load: the machine's load average around the benchmarks, and whether they
	// started below the limit (quiet). Nil in reports older than the limit.
	Load  *Load    `json:"load,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// Code is the code the benchmarks measured (nil in older reports).
	Code *results.Code `json:"code,omitempty"`
}

// ScalePoint is one backend's contended figures with Waiters clients on one key.
type ScalePoint struct {
	Backend    string  `json:"backend"`
	Waiters    int     `json:"waiters"`
	Handoffs   float64 `json:"handoffs_per_second"`
	PerHandoff float64 `json:"requests_per_handoff,omitempty"` // store requests per hand-off; 0 where not counted
}

// Target is one speed target: a ratio of this run against its limit.
type Target struct {
	Claim  string    `json:"claim"`
	Value  float64   `json:"value,omitempty"` // the median over the repetitions
	Values []float64 `json:"values,omitempty"`
	Limit  float64   `json:"limit"`
	AtMost bool      `json:"at_most,omitempty"`
	Met    bool      `json:"met"`
	// Missing names the side of the ratio that was not measured.
	Missing string `json:"missing,omitempty"`
}

// Load is the load average around a benchmark run.
type Load struct {
	Before string  `json:"before"`
	After  string  `json:"after"`
	Limit  float64 `json:"limit"`
	Forced bool    `json:"forced,omitempty"`
	Quiet  bool    `json:"quiet"` // started below Limit, not forced
}

// SpeedRow is one backend's row of the speed table.
type SpeedRow struct {
	Backend string   `json:"backend"`
	Values  []string `json:"values"`
}

// Latency summarizes one backend's latency distribution.
type Latency struct {
	Backend string        `json:"backend"`
	N       int           `json:"n"`
	P50     time.Duration `json:"p50_ns"`
	P90     time.Duration `json:"p90_ns,omitempty"`
	P99     time.Duration `json:"p99_ns"`
	Max     time.Duration `json:"max_ns"`
	Mean    time.Duration `json:"mean_ns,omitempty"`
}

// Rate is one backend's throughput in one setting.
type Rate struct {
	Backend   string  `json:"backend"`
	Clients   int     `json:"clients,omitempty"`
	PerSecond float64 `json:"per_second"`
}

// Read returns the report at path (a report.json written by WriteFiles).
func Read(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("report: %s: %w", path, err)
	}
	return &r, nil
}

// CellFiles returns the JSON cell files in dir (conformance-*.json and faults-*.json,
// as conformance writes them into $DLOCK_REPORT_DIR), sorted.
func CellFiles(dir string) ([]string, error) {
	var files []string
	for _, pat := range []string{"conformance-*.json", "faults-*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	return files, nil
}

// ReadCells reads one cell file: a conformance.Report in JSON.
func ReadCells(path string) ([]results.Cell, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r struct {
		Cells []results.Cell `json:"cells"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("report: %s is not a conformance cell file: %w", path, err)
	}
	return r.Cells, nil
}

// FromDir builds a report from a directory without running anything: its
// report.json if there is one, else its cell files (and speed.json, a Speed, if
// present). It fails when the directory holds neither.
func FromDir(dir string) (*Report, error) {
	if r, err := Read(filepath.Join(dir, "report.json")); err == nil {
		return r, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	files, err := CellFiles(dir)
	if err != nil {
		return nil, err
	}
	r := &Report{}
	for _, f := range files {
		cells, err := ReadCells(f)
		if err != nil {
			return nil, err
		}
		r.Cells = append(r.Cells, cells...)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "speed.json")); err == nil {
		r.Speed = &Speed{}
		if err := json.Unmarshal(data, r.Speed); err != nil {
			return nil, fmt.Errorf("report: %s: %w", filepath.Join(dir, "speed.json"), err)
		}
	}
	if len(r.Cells) == 0 && r.Speed == nil {
		return nil, fmt.Errorf("report: %s has no report.json, no conformance-*.json or faults-*.json cell files and no speed.json", dir)
	}
	return r, nil
}

// JSON returns r as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// WriteFiles writes report.json, report.md and report.html into dir (created if
// missing) and returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := r.JSON()
	if err != nil {
		return nil, err
	}
	html, err := r.HTML()
	if err != nil {
		return nil, err
	}
	var paths []string
	for name, data := range map[string][]byte{"report.json": js, "report.md": []byte(r.Markdown()), "report.html": html} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths, nil
}

// Surprises returns the cells whose outcome differs from what the backend declares.
func (r *Report) Surprises() []results.Cell {
	var out []results.Cell
	for _, c := range r.Cells {
		if c.Surprise() {
			out = append(out, c)
		}
	}
	return out
}

// matrix is one table of cells: rows are backends, columns properties or scenarios.
type matrix struct {
	kind  string // "conformance", "faults", a family's name (spec.Families), its name + "-faults", or "primitives"
	Title string
	Rows  []string
	Cols  []string
	Cell  map[[2]string]results.Cell
}

// matrices splits the cells into the conformance matrix (backend × property), a
// property matrix and a fault matrix for each primitive family (whose columns are
// named by the mutex scenario each of its scenarios mirrors), any other
// primitive's properties, and the mutex's fault matrix (backend × scenario), each
// in the suite's order.
func (r *Report) matrices() []matrix {
	newMatrix := func(kind, title string) *matrix {
		return &matrix{kind: kind, Title: title, Cell: map[[2]string]results.Cell{}}
	}
	conf := newMatrix("conformance", "Conformance (backend × property)")
	faults := newMatrix("faults", "Faults (backend × scenario: the property each fault threatens)")
	prims := newMatrix("primitives", "Other primitives (backend × property)")
	var fams []*matrix
	famOf := map[string]*matrix{} // property or scenario name → its family's matrix
	for _, f := range spec.Families {
		pm := newMatrix(f.Name, "The "+f.Name+" (backend × property)")
		fm := newMatrix(f.Name+"-faults", "Faults of the "+f.Name+" (backend × the mutex scenario it mirrors)")
		for _, p := range f.Properties {
			famOf[string(p)] = pm
		}
		for _, s := range f.Scenarios {
			famOf[string(s)] = fm
		}
		fams = append(fams, pm, fm)
	}
	for _, c := range r.Cells {
		m, col := faults, c.Scenario
		switch {
		case c.Scenario == "Conformance" && slices.Contains(spec.Properties, spec.Property(c.Property)):
			m, col = conf, c.Property
		case c.Scenario == "Conformance" && famOf[c.Property] != nil:
			m, col = famOf[c.Property], c.Property
		case c.Scenario == "Conformance":
			m, col = prims, c.Property
		case famOf[c.Scenario] != nil:
			m, col = famOf[c.Scenario], string(spec.MutexScenarioOf(spec.Scenario(c.Scenario)))
		}
		if !slices.Contains(m.Rows, c.Backend) {
			m.Rows = append(m.Rows, c.Backend)
		}
		if !slices.Contains(m.Cols, col) {
			m.Cols = append(m.Cols, col)
		}
		// One backend may be run by several tests, each applying some scenarios:
		// a cell that was run wins over one that says "not applicable".
		k := [2]string{c.Backend, col}
		if old, ok := m.Cell[k]; !ok || old.Status == spec.NotApplicable || c.Status != spec.NotApplicable {
			m.Cell[k] = c
		}
	}
	order := func(cols []string, known []string) {
		slices.SortStableFunc(cols, func(a, b string) int {
			ia, ib := slices.Index(known, a), slices.Index(known, b)
			if ia < 0 {
				ia = len(known)
			}
			if ib < 0 {
				ib = len(known)
			}
			return ia - ib
		})
	}
	var props, scen []string
	for _, p := range spec.Properties {
		props = append(props, string(p))
	}
	for _, s := range spec.Scenarios {
		scen = append(scen, string(s))
	}
	var famProps []string
	for _, p := range spec.PrimitiveProperties {
		famProps = append(famProps, string(p))
	}
	order(conf.Cols, props)
	order(faults.Cols, scen)
	for _, m := range fams {
		order(m.Cols, slices.Concat(famProps, scen))
	}
	var out []matrix
	for _, m := range slices.Concat([]*matrix{conf}, fams, []*matrix{prims, faults}) {
		if len(m.Rows) > 0 {
			out = append(out, *m)
		}
	}
	return out
}

// kind classifies a cell for rendering.
func kind(c results.Cell, ok bool) string {
	switch {
	case !ok:
		return "none"
	case c.Surprise():
		return "surprise"
	case c.Status == spec.Held:
		return "held"
	case c.Status == spec.Violated:
		return "weak"
	case c.Status == spec.Unavailable:
		return "unavailable"
	case c.Status == spec.NotApplicable:
		return "na"
	}
	return "surprise" // e.g. "failed": the subtest broke
}

// legend explains the kinds.
var legend = []struct{ Kind, Text string }{
	{"held", "held in every exercised trial, as declared"},
	{"weak", "violated in k of n exercised trials, as the backend declares (a known weakness, reproduced)"},
	{"unavailable", "the lock service did not answer (as declared)"},
	{"surprise", "differs from the declaration (a cell none of whose trials was exercised included): the test failed"},
	{"sometimes", "marked \"sometimes\": a timing-dependent weakness, declared as such, seen in some trials and not in others"},
	{"na", "not applicable / not run"},
}

// MarkStale marks the cells (and the speed table) whose code changed since the run:
// stale maps a cell's Code.Package to the commit it ran on. Renderings then say
// "stale" with that commit.
func (r *Report) MarkStale(stale map[string]string) {
	for i := range r.Cells {
		if c := r.Cells[i].Code; c != nil {
			r.Cells[i].Stale = stale[c.Package]
		}
	}
}
