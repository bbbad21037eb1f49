package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/cmdline"
)

// TestBenchCommand runs "dlock-lab bench" on the in-process backend (no servers needed):
// the table, the JSON, and the usage errors with their exit codes.
func TestBenchCommand(t *testing.T) {
	quick := []string{"bench", "--targets", "mem", "--duration", "100ms", "--rounds", "5", "--many-clients", "4", "--keys", "10", "--waiters", "2,4", "--repeat", "2", "--quiet", "--force"}
	out, err := exec.Command(labBin, quick...).Output()
	if err != nil {
		t.Fatalf("dlock-lab bench: %v\n%s", err, out)
	}
	for _, want := range []string{"| mem | backend |", "Command: `dlock-lab bench --duration=100ms", "mem: longest wait", "the load average was", "2 waiters"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = exec.Command(labBin, append(quick, "--json", "--skip", "contended,manykeys")...).Output()
	if err != nil {
		t.Fatalf("dlock-lab bench --json: %v\n%s", err, out)
	}
	var res struct {
		Rows []struct {
			Name      string
			Contended *struct{}
			Allocs    *struct{ PerCycle float64 }
		}
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Rows) != 1 || res.Rows[0].Name != "mem" || res.Rows[0].Contended != nil || res.Rows[0].Allocs == nil {
		t.Fatalf("dlock-lab bench --json --skip contended,manykeys: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"bench", "--targets", "nope"},
		{"bench", "--skip", "nope"},
		{"bench", "extra"},
		{"bench", "--repeat", "0"},
		{"bench", "--waiters", "8,4"},
		{"bench", "--max-load", "-1"},
	} {
		out, err := exec.Command(labBin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cmdline.ExitUsage || args[1] == "--targets" && !strings.Contains(string(out), "nope") || args[1] == "--waiters" && !strings.Contains(string(out), "4 after 8") {
			t.Errorf("dlock %s: %v, want exit %d naming the bad value\n%s", strings.Join(args, " "), err, cmdline.ExitUsage, out)
		}
	}
}

// TestBenchBusyMachine: above --max-load, after --quiet-wait, dlock-lab bench measures
// nothing and exits 75, saying the load.
func TestBenchBusyMachine(t *testing.T) {
	out, err := exec.Command(labBin, "bench", "--targets", "mem", "--max-load", "0.000001", "--quiet-wait", "10ms", "--quiet").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cmdline.ExitTempFail || !strings.Contains(string(out), "load average") || strings.Contains(string(out), "| mem |") {
		t.Fatalf("dlock-lab bench on a busy machine: %v, want exit %d and no table\n%s", err, cmdline.ExitTempFail, out)
	}
}
