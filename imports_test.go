package dlock_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The rule for what may import what (docs/architecture.md, "What may import what"):
//
//   - the user's dlock (cmd/dlock) links the library, the backends, conformance and
//     dlockprom: no etcd server, no container engine client, no peer library, and
//     none of the lab's or the tests' infrastructure;
//   - a backend imports the library and backends/internal, never internal/ (test and
//     lab infrastructure);
//   - nothing in this module imports the lab module (github.com/dlock-go/dlock/lab),
//     tests included: its dependencies would become this module's;
//   - dlocktest, a library for users' tests, links the library and memlock only:
//     nothing of internal/, the lab or the heavy modules.
//
// TestImportRules checks the four on the packages as they are.

const modulePath = "github.com/dlock-go/dlock"

// heavy are the import path prefixes of what the user's binary and this module's
// go.mod must not carry.
var heavy = []string{
	"go.etcd.io/etcd/server/", "go.etcd.io/raft/", "go.etcd.io/bbolt",
	"github.com/testcontainers/", "github.com/moby/", "github.com/docker/",
	"github.com/bsm/redislock", "github.com/go-redsync/",
}

// labOnly are this repository's packages the user's binary must not link.
var labOnly = []string{
	modulePath + "/lab/", modulePath + "/internal/servers", modulePath + "/internal/bench",
	modulePath + "/internal/measure", modulePath + "/internal/clitest", modulePath + "/internal/schemetest",
	modulePath + "/internal/fencetest", modulePath + "/internal/closetest",
}

type listedPackage struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	DepsErrors                         []struct{ Err string }
	Error                              *struct{ Err string }
}

// goList runs go list -json with args in the module's root and decodes its stream.
func goList(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func hasPrefix(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool {
		return strings.HasPrefix(path, p) || path == strings.TrimSuffix(p, "/")
	})
}

func TestImportRules(t *testing.T) {
	t.Run("user binary", func(t *testing.T) {
		deps := goList(t, "-deps", "./cmd/dlock")
		for _, p := range deps {
			if hasPrefix(p.ImportPath, heavy) || hasPrefix(p.ImportPath, labOnly) {
				t.Errorf("cmd/dlock links %s", p.ImportPath)
			}
		}
		if len(deps) < 10 {
			t.Fatalf("go list -deps ./cmd/dlock listed %d packages: the check saw nothing", len(deps))
		}
	})
	pkgs := goList(t, "./...")
	t.Run("backends", func(t *testing.T) {
		seen := 0
		for _, p := range pkgs {
			if !strings.HasPrefix(p.ImportPath, modulePath+"/backends/") || strings.HasPrefix(p.ImportPath, modulePath+"/backends/internal/") {
				continue
			}
			seen++
			for _, imp := range p.Imports {
				if strings.HasPrefix(imp, modulePath+"/internal/") {
					t.Errorf("backend %s imports %s (internal/ is test and lab infrastructure; a backend's helpers live in backends/internal/)", p.ImportPath, imp)
				}
			}
		}
		if seen < 6 {
			t.Fatalf("saw %d backend packages, want every one", seen)
		}
	})
	t.Run("dlocktest", func(t *testing.T) {
		// A library for users' tests: what it links (its tests apart) is what a
		// user's test binary links — the library and memlock, nothing of the lab's,
		// of internal/ or the heavy modules.
		deps := goList(t, "-deps", "./dlocktest")
		seen := false
		for _, p := range deps {
			seen = seen || p.ImportPath == modulePath+"/backends/memlock"
			if hasPrefix(p.ImportPath, heavy) || hasPrefix(p.ImportPath, labOnly) || strings.HasPrefix(p.ImportPath, modulePath+"/internal/") {
				t.Errorf("dlocktest links %s", p.ImportPath)
			}
		}
		if !seen {
			t.Fatalf("go list -deps ./dlocktest does not list memlock: the check saw nothing")
		}
	})
	t.Run("no lab", func(t *testing.T) {
		for _, p := range pkgs {
			for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
				if strings.HasPrefix(imp, modulePath+"/lab/") {
					t.Errorf("%s imports %s: the root module must not depend on the lab module", p.ImportPath, imp)
				}
			}
		}
	})
	t.Run("go.mod", func(t *testing.T) {
		b, err := os.ReadFile("go.mod")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "require" {
				f = f[1:]
			}
			if len(f) > 0 && hasPrefix(f[0], heavy) {
				t.Errorf("go.mod requires %s", f[0])
			}
		}
	})
}

// redisExample is the README's first example as a program of a user's own.
const redisExample = `package main

import (
	"context"
	"log"
	"time"

	"github.com/dlock-go/dlock"
	_ "github.com/dlock-go/dlock/backends/redislock"
)

func main() {
	ctx := context.Background()
	locker, err := dlock.Open(ctx, "redis://127.0.0.1:6379")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "reports/daily", dlock.WithTTL(30*time.Second), dlock.WithAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
}
`

// TestREADMEExampleModules builds the README's Redis example in a fresh module that
// requires this one (replaced by this checkout) and checks its module graph: none of
// the lab's heavy modules, and no more than the README says.
func TestREADMEExampleModules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not in -short")
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/redisexample\n\ngo 1.26.0\n\nrequire " + modulePath + " v0.0.0\n\nreplace " + modulePath + " => " + root + "\n"
	for name, content := range map[string]string{"go.mod": gomod, "main.go": redisExample} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=") // go mod tidy writes go.mod and go.sum; nothing else does
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	for _, m := range mods {
		if hasPrefix(m+"/", heavy) || strings.HasPrefix(m, modulePath+"/lab") {
			t.Errorf("the example's module graph holds %s", m)
		}
	}
	lines := strings.Count(string(sum), "\n")
	t.Logf("the README's Redis example: %d modules in go list -m all, %d lines of go.sum", len(mods), lines)
	// The README's figures (41 modules, 60 lines), with room for a dependency's own
	// upgrade; a lab module coming back would add dozens.
	if len(mods) > 50 || lines > 80 {
		t.Errorf("%d modules, %d go.sum lines: more than the README's 41 and 60 allow", len(mods), lines)
	}
}
