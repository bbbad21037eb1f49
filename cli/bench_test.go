package cli

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestBenchCommand runs "dlock bench" on the in-process backend (no servers needed):
// the table, the JSON, and the usage errors with their exit codes.
func TestBenchCommand(t *testing.T) {
	quick := []string{"bench", "--targets", "mem", "--duration", "100ms", "--rounds", "5", "--many-clients", "4", "--keys", "10", "--quiet"}
	out, err := exec.Command(dlockBin, quick...).Output()
	if err != nil {
		t.Fatalf("dlock bench: %v\n%s", err, out)
	}
	for _, want := range []string{"| mem | backend |", "Command: `dlock bench --duration=100ms", "mem: longest wait"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(dlockBin, append(quick, "--json", "--skip", "contended,manykeys")...).Output()
	if err != nil {
		t.Fatalf("dlock bench --json: %v\n%s", err, out)
	}
	var res struct {
		Rows []struct {
			Name      string
			Contended *struct{}
			Allocs    *struct{ PerCycle float64 }
		}
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Rows) != 1 || res.Rows[0].Name != "mem" || res.Rows[0].Contended != nil || res.Rows[0].Allocs == nil {
		t.Fatalf("dlock bench --json --skip contended,manykeys: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"bench", "--targets", "nope"},
		{"bench", "--skip", "nope"},
		{"bench", "extra"},
	} {
		out, err := exec.Command(dlockBin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "nope") && args[1] != "extra" {
			t.Errorf("dlock %s: %v, want exit %d naming the bad value\n%s", strings.Join(args, " "), err, exitUsage, out)
		}
	}
}
