package conformance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Status is the outcome of one property under one scenario on one backend.
type Status string

const (
	Held          Status = "held"           // checked in every trial, never violated
	Violated      Status = "violated"       // violated in at least one trial (evidence attached)
	Unavailable   Status = "unavailable"    // the lock service could not answer (for how long: Cell.Unavailable)
	NotApplicable Status = "not applicable" // the scenario does not apply to the backend

	// Sometimes is an expectation, never an outcome: a timing-dependent weakness that
	// shows in some trials and not in others (e.g. a client library that learns of
	// its lost lease a moment after the server frees it). Held and Violated both
	// agree with it; Capabilities.FaultTrials should then ask for enough trials that
	// the violation is likely to show, and the report says which it was.
	Sometimes Status = "sometimes"
)

// Cell is one backend × scenario × property result.
type Cell struct {
	Backend  string `json:"backend"`
	Scenario string `json:"scenario"`
	Property string `json:"property"`
	Status   Status `json:"status"`
	// Expected is what the backend's Capabilities predict; a Cell whose Status differs
	// is a surprise and fails the test that made it.
	Expected   Status `json:"expected"`
	Trials     int    `json:"trials"`
	Violations int    `json:"violations"`
	// Evidence: holders, tokens, timings of violations (at most a few), or notes.
	Evidence    []string      `json:"evidence,omitempty"`
	Unavailable time.Duration `json:"unavailable_ns,omitempty"`
	// Margin: for Partition, how long before the next grant the cut-off holder's
	// lease ended (smallest over the trials; negative would be a violation).
	Margin time.Duration `json:"margin_ns,omitempty"`
}

// Surprise reports whether the outcome differs from the expectation. A Sometimes
// expectation accepts Held and Violated.
func (c Cell) Surprise() bool {
	if c.Expected == Sometimes {
		return c.Status != Held && c.Status != Violated
	}
	return c.Expected != "" && c.Status != c.Expected
}

// Report collects Cells. Safe for concurrent use.
type Report struct {
	mu      sync.Mutex
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Trials  int    `json:"trials"`
	Cells   []Cell `json:"cells"`
}

// Add records c.
func (r *Report) Add(c Cell) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Cells = append(r.Cells, c)
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return json.MarshalIndent(r, "", "  ")
}

// ShortStatus renders a cell for a matrix: "held 3/3", "VIOLATED 2/3", "unavailable".
func (c Cell) ShortStatus() string {
	s := ""
	switch c.Status {
	case Held:
		s = fmt.Sprintf("held %d/%d", c.Trials-c.Violations, c.Trials)
	case Violated:
		s = fmt.Sprintf("VIOLATED %d/%d", c.Violations, c.Trials)
	default:
		s = string(c.Status)
	}
	switch {
	case c.Surprise():
		s += fmt.Sprintf(" (expected %s!)", c.Expected)
	case c.Expected == Sometimes:
		s += " (timing-dependent)"
	}
	return s
}

// Markdown renders a matrix: one row per backend, one column per scenario/property,
// followed by the evidence of every violation.
func (r *Report) Markdown() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var backends, cols []string
	cell := map[[2]string]Cell{}
	for _, c := range r.Cells {
		col := c.Scenario + " / " + c.Property
		if !slices.Contains(backends, c.Backend) {
			backends = append(backends, c.Backend)
		}
		if !slices.Contains(cols, col) {
			cols = append(cols, col)
		}
		// A cell that was run wins over a "not applicable" one from another test.
		k := [2]string{c.Backend, col}
		if old, ok := cell[k]; !ok || old.Status == NotApplicable || c.Status != NotApplicable {
			cell[k] = c
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| backend | %s |\n|---|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, be := range backends {
		fmt.Fprintf(&b, "| %s |", be)
		for _, col := range cols {
			c, ok := cell[[2]string{be, col}]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s |", c.ShortStatus())
		}
		b.WriteString("\n")
	}
	var ev []string
	for _, c := range r.Cells {
		if len(c.Evidence) == 0 {
			continue
		}
		line := fmt.Sprintf("- **%s, %s / %s** (%s): %s", c.Backend, c.Scenario, c.Property, c.ShortStatus(), strings.Join(c.Evidence, "; "))
		if c.Margin != 0 {
			line += fmt.Sprintf(" (smallest margin %v)", c.Margin)
		}
		ev = append(ev, line)
	}
	if len(ev) > 0 {
		b.WriteString("\nEvidence and notes:\n\n" + strings.Join(ev, "\n") + "\n")
	}
	return b.String()
}
