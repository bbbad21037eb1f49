// Package results is the exchange format between the conformance suite and the
// report: the cells that conformance.Run and conformance.RunFaults write as JSON
// files into $DLOCK_REPORT_DIR, one file per test, for `dlock-lab compare` and
// `dlock check` to read back and render (package report).
package results

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/spec"
)

// DirEnv names the environment variable that makes the suite write its cells, as
// JSON, into a directory.
const DirEnv = "DLOCK_REPORT_DIR"

// Cell is one backend × scenario × property result.
type Cell struct {
	Backend  string      `json:"backend"`
	Scenario string      `json:"scenario"`
	Property string      `json:"property"`
	Status   spec.Status `json:"status"`
	// Expected is what the backend's declaration predicts; a Cell whose Status
	// differs is a surprise and fails the test that made it.
	Expected spec.Status `json:"expected"`
	// Trials is how many trials ran; Exercised how many of them did what the
	// property or scenario needs to show anything (the others are in Evidence with
	// the reason); Violations how many the checker found violated.
	Trials     int `json:"trials"`
	Exercised  int `json:"exercised"`
	Violations int `json:"violations"`
	// Histories are the recorded histories (JSON lines) kept for the cell — every
	// violated trial's, and the first trial's — and Visualizations porcupine's
	// rendering of the first violated trial's history (see the report's legend);
	// paths relative to the report directory.
	Histories      []string `json:"histories,omitempty"`
	Visualizations []string `json:"visualizations,omitempty"`
	// Code identifies the code the cell tested (stamped by the lab when it collects
	// the cell): a cell whose code has changed since is stale.
	Code *Code `json:"code,omitempty"`
	// Stale is set by a reader that found the cell's code changed since it ran (the
	// commit it ran on); renderings say so. Not stored.
	Stale string `json:"-"`
	// Evidence: holders, tokens, timings of violations (at most a few), or notes.
	Evidence    []string      `json:"evidence,omitempty"`
	Unavailable time.Duration `json:"unavailable_ns,omitempty"`
	// Margin: for Partition, how long before the next grant the cut-off holder's
	// lease ended (smallest over the trials; negative would be a violation).
	Margin time.Duration `json:"margin_ns,omitempty"`
}

// Code is the code a cell tested: the commit it ran on and a hash of the source of
// the packages it exercised (the module's packages its test imports, the test's own
// package included).
type Code struct {
	Commit string `json:"commit"`
	Hash   string `json:"hash"`
	// Package is the package whose test made the cell.
	Package string `json:"package"`
	// Dirty: the working tree differed from Commit when the cell ran.
	Dirty bool `json:"dirty,omitempty"`
}

// Surprise reports whether the outcome differs from the expectation. A Sometimes
// expectation accepts Held and Violated.
func (c Cell) Surprise() bool {
	if c.Expected == spec.Sometimes {
		return c.Status != spec.Held && c.Status != spec.Violated
	}
	return c.Expected != "" && c.Status != c.Expected
}

// Counted returns the cell's exercised trials: Exercised, or for a cell of a report
// older than the history checker (which counted every trial), Trials.
func (c Cell) Counted() int {
	if c.Exercised == 0 && (c.Status == spec.Held || c.Status == spec.Violated) {
		return c.Trials
	}
	return c.Exercised
}

// SomeTrials reports whether the cell was violated in some of its exercised trials
// but not all: what a "sometimes" legend may say, computed from the counts.
func (c Cell) SomeTrials() bool {
	return c.Status == spec.Violated && c.Violations < c.Counted()
}

// ShortStatus renders a cell for a matrix: "held 3/3", "VIOLATED 2/3", "unavailable".
func (c Cell) ShortStatus() string {
	s := ""
	switch c.Status {
	case spec.Held:
		s = fmt.Sprintf("held %d/%d", c.Counted(), c.Counted())
		if c.Counted() < c.Trials {
			s += fmt.Sprintf(" (%d not exercised)", c.Trials-c.Counted())
		}
	case spec.NotExercised:
		s = fmt.Sprintf("not exercised in %d trials", c.Trials)
	case spec.Violated:
		s = fmt.Sprintf("VIOLATED %d/%d", c.Violations, c.Counted())
	default:
		s = string(c.Status)
	}
	switch {
	case c.Surprise():
		s += fmt.Sprintf(" (expected %s!)", c.Expected)
	case c.Expected == spec.Sometimes:
		s += " (timing-dependent)"
	}
	return s
}

// Note adds evidence, keeping a few items.
func (c *Cell) Note(format string, args ...any) {
	if len(c.Evidence) < 6 {
		c.Evidence = append(c.Evidence, fmt.Sprintf(format, args...))
	}
}

// Violation counts a violation and adds its evidence.
func (c *Cell) Violation(format string, args ...any) {
	c.Violations++
	c.Note(format, args...)
}

// File is the content of one cell file. Safe for concurrent use.
type File struct {
	mu      sync.Mutex
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Trials  int    `json:"trials"`
	Cells   []Cell `json:"cells"`
}

// Add records c.
func (f *File) Add(c Cell) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Cells = append(f.Cells, c)
}

// JSON returns the file's content as indented JSON.
func (f *File) JSON() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return json.MarshalIndent(f, "", "  ")
}

// SaveAtEnd writes f into $DLOCK_REPORT_DIR when t ends, if the variable is set, as
// <kind>-<backend>-<test name>.json.
func SaveAtEnd(t *testing.T, kind, backend string, f *File) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("report: %v", err)
			return
		}
		data, err := f.JSON()
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		// The test's name too: one backend may be run by several tests (or twice).
		name := kind + "-" + FileSafe(backend) + "-" + FileSafe(t.Name()) + ".json"
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Errorf("report: %v", err)
		}
	})
}

// FileSafe maps s to a file name: letters, digits, '-' and '.' kept, anything else
// '_'.
func FileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}
