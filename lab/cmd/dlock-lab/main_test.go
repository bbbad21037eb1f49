package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/clitest"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// labBin is the dlock-lab binary the end-to-end tests run, built by TestMain.
var labBin string

func TestMain(m *testing.M) {
	dir, err := clitest.Build(".", ".")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	labBin = filepath.Join(dir, "dlock-lab")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(servertest.Finish(code))
}

// runLong runs dlock-lab with args in dir (the package directory if ""), with extra
// environment, for at most timeout, and returns its exit code, stdout and stderr.
func runLong(t *testing.T, timeout time.Duration, dir string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, labBin, timeout, dir, env, args...)
}

// mustMatch reports whether s matches the regular expression pattern.
func mustMatch(t *testing.T, pattern string, s string) bool {
	t.Helper()
	ok, err := regexp.MatchString(pattern, s)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
