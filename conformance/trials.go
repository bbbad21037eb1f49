package conformance

import (
	"fmt"
	"iter"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// cellRun runs the trials of one cell: each trial records a history (recorder), the
// checker decides it (check), and the cell counts trials, exercised trials and
// violations, keeps the evidence, and saves the histories worth keeping.
type cellRun struct {
	t    testing.TB
	c    *results.Cell
	rec  *recorder
	want int // exercised trials wanted
	dir  string
	base string // file name prefix of the cell's histories
	cur  *history
	i    int
}

// historiesDir is where the suite keeps histories and visualizations: a folder of
// $DLOCK_REPORT_DIR, or nothing when it is not set.
func historiesDir() string {
	if d := os.Getenv(results.DirEnv); d != "" {
		return filepath.Join(d, "histories")
	}
	return ""
}

func newCellRun(t testing.TB, c *results.Cell, want int) *cellRun {
	r := &cellRun{t: t, c: c, rec: newRecorder(), want: max(want, 1), dir: historiesDir(),
		base: results.FileSafe(c.Backend + "-" + c.Scenario + "-" + c.Property)}
	t.Cleanup(r.rec.close)
	return r
}

// maxTrialsFactor bounds the trials a cell may run to reach its exercised trials.
const maxTrialsFactor = 3

// trials yields trial numbers until the cell has want exercised trials, or has run
// maxTrialsFactor times as many, or stop says so (a scenario that cannot go on).
// Each trial begins a history; the caller ends it with judge.
func (r *cellRun) trials() iter.Seq[int] {
	return func(yield func(int) bool) {
		for i := 0; r.c.Exercised < r.want && i < maxTrialsFactor*r.want; i++ {
			r.i, r.cur = i, r.rec.begin()
			if !yield(i) {
				return
			}
		}
	}
}

// judge ends the current trial: the checker decides it against cl.
func (r *cellRun) judge(cl claims) outcome {
	r.c.Trials++
	r.cur.settle()
	name := fmt.Sprintf("%s-trial%d", r.base, r.i)
	// Kept: the first trial's history, and the first violated trial's with its
	// visualizations (one of each is what a reader opens; a campaign of 20 trials a
	// cell would otherwise keep hundreds).
	dir := r.dir
	if r.c.Violations > 0 {
		dir = ""
	}
	o := check(r.cur, cl, dir, name)
	switch {
	case o.violated():
		r.c.Exercised++
		r.c.Violations++
		for _, e := range o.evidence {
			r.c.Note("trial %d: %s", r.i, e)
		}
	case o.exercised:
		r.c.Exercised++
	default:
		r.c.Note("trial %d not exercised: %s", r.i, o.why)
	}
	for _, e := range o.wrongCauses {
		r.t.Errorf("trial %d: %s", r.i, e)
	}
	for _, p := range o.viz {
		r.c.Visualizations = append(r.c.Visualizations, r.rel(p))
	}
	if dir != "" && (o.violated() || r.i == 0) {
		if p, err := r.save(name); err != nil {
			r.t.Errorf("saving the history of trial %d: %v", r.i, err)
		} else {
			r.c.Histories = append(r.c.Histories, r.rel(p))
		}
	}
	return o
}

// save writes the current trial's history as JSON lines.
func (r *cellRun) save(name string) (string, error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(r.dir, name+".jsonl")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	events, _ := r.cur.snapshot()
	if err := writeJSONL(f, r.cur.start, events); err != nil {
		f.Close()
		return "", err
	}
	return p, f.Close()
}

// rel makes p relative to the report directory.
func (r *cellRun) rel(p string) string {
	if rel, err := filepath.Rel(filepath.Dir(r.dir), p); err == nil {
		return rel
	}
	return p
}

// status is the cell's outcome from its counts.
func cellStatus(c *results.Cell) spec.Status {
	switch {
	case c.Violations > 0:
		return spec.Violated
	case c.Trials > 0 && c.Exercised == 0:
		return spec.NotExercised
	}
	return spec.Held
}

// margin is how long before granted the last lease of key held by client ended, in
// the current trial.
func (r *cellRun) margin(key, client string, granted int64) (time.Duration, bool) {
	events, _ := r.cur.snapshot()
	v := newView(events, r.cur.start, nil)
	var end int64
	for _, h := range v.grants(key) {
		if h.client == client {
			end = max(end, h.end)
		}
	}
	if end == 0 || end == math.MaxInt64 {
		return 0, false
	}
	return time.Duration(granted - end), true
}

// copyInto gives c the counts and evidence of r's cell (a second fact measured by
// another scenario's trials), keeping c's identity.
func (r *cellRun) copyInto(c *results.Cell) {
	c.Property, c.Trials, c.Exercised, c.Violations = r.c.Property, r.c.Trials, r.c.Exercised, r.c.Violations
	c.Evidence, c.Histories, c.Visualizations = r.c.Evidence, r.c.Histories, r.c.Visualizations
}
