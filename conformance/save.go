package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Namer is implemented by a harness that names its backend in reports (e.g.
// "redis", "redlock(5)", "peer:bsm/redislock"). Without it the test's name is used.
type Namer interface {
	Name() string
}

// ReportDirEnv names the environment variable that makes Run and RunFaults write
// their results as JSON (one file per run) into a directory, for `dlock compare` to
// merge into one report.
const ReportDirEnv = "DLOCK_REPORT_DIR"

// backendName is the harness's Name, else "<test binary's package>/<test name>",
// e.g. "redislock/TestConformanceCluster".
func backendName(t *testing.T, h Harness) string {
	if n, ok := h.(Namer); ok {
		return n.Name()
	}
	pkg := strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")
	return pkg + "/" + t.Name()
}

// saveAtEnd writes r into $DLOCK_REPORT_DIR when t ends, if the variable is set.
func saveAtEnd(t *testing.T, kind, backend string, r *Report) {
	dir := os.Getenv(ReportDirEnv)
	if dir == "" {
		return
	}
	t.Cleanup(func() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Errorf("report: %v", err)
			return
		}
		data, err := r.JSON()
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		// The test's name too: one backend may be run by several tests (or twice).
		name := kind + "-" + fileSafe(backend) + "-" + fileSafe(t.Name()) + ".json"
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Errorf("report: %v", err)
		}
	})
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '_'
	}, s)
}

// propertyCell records one property's outcome in a conformance run.
func propertyCell(backend string, p Property, weak bool, t *testing.T, evidence []string) Cell {
	c := Cell{Backend: backend, Scenario: "Conformance", Property: string(p), Trials: 1, Expected: Held}
	if weak {
		c.Expected = Violated
	}
	switch {
	case t.Skipped():
		c.Status, c.Expected = NotApplicable, NotApplicable
	case t.Failed():
		c.Status = "failed"
		c.note("the subtest failed: see the test log")
	case weak:
		c.Status, c.Violations = Violated, 1
	default:
		c.Status = Held
	}
	for _, e := range evidence {
		c.note("%s", e)
	}
	return c
}
