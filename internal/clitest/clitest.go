// Package clitest runs dlock's commands (dlock, dlock-lab) as processes in tests: it
// builds them and runs them with a time limit. The end-to-end tests of package cli
// and of the lab command share it.
package clitest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build builds the main packages pkgs (as go build names them, relative to dir)
// into a new temporary directory and returns it; the caller removes it. The binaries
// are named after their packages' directories.
func Build(dir string, pkgs ...string) (string, error) {
	out, err := os.MkdirTemp("", "dlock-e2e-")
	if err != nil {
		return "", err
	}
	build := exec.Command("go", append([]string{"build", "-o", out + string(filepath.Separator)}, pkgs...)...)
	build.Dir = dir
	if b, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(out)
		return "", &BuildError{Err: err, Output: string(b)}
	}
	return out, nil
}

// BuildError is a failed go build, with its output.
type BuildError struct {
	Err    error
	Output string
}

func (e *BuildError) Error() string { return "go build: " + e.Err.Error() + "\n" + e.Output }

// Run runs bin with args in dir (the test's working directory if ""), with env added
// to this process's environment, for at most timeout (then it fails the test), and
// returns its exit status (128+n for a signal), stdout and stderr.
func Run(t testing.TB, bin string, timeout time.Duration, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v still running after %v; stderr:\n%s", filepath.Base(bin), args, timeout, errb.String())
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return ExitStatus(cmd.ProcessState), out.String(), errb.String()
}

// ExitStatus is ps's exit code, or 128+n when a signal n ended the process.
func ExitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
