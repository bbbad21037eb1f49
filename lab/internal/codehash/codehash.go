// Package codehash binds the report's cells to the code they tested: the commit a
// run was made on, and a hash of the source of the packages one test package
// exercised — the test package itself (its tests included) and every package of
// dlock's two modules it imports, directly or not (without their tests, which its
// test binary does not contain). A cell whose hash differs from the tree's now is
// stale: the code it vouches for has changed since.
package codehash

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// modulePrefix is the path every package of dlock's modules starts with.
const modulePrefix = "github.com/dlock-go/dlock"

// pkg is what `go list -json` says of a package, as far as hashing needs.
type pkg struct {
	ImportPath                                   string
	Dir                                          string
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles []string
	EmbedFiles, TestEmbedFiles, XTestEmbedFiles  []string
	OtherFiles                                   []string
	ForTest                                      string
}

// Of returns the hash of the source that the test package pkgPath (e.g.
// "./backends/redislock"), in the module rooted at dir, exercises: the files of
// every dlock package in `go list -deps -test` of it (sorted by import path, each
// file's name and content), as hex — the test files of pkgPath itself, not those
// of the packages it imports. Changing any of them — a backend's algorithm, the
// lease core, the conformance suite, a Lua script, the tested package's harness —
// changes the hash; another package's tests do not.
func Of(dir, pkgPath string) (string, error) {
	cmd := exec.Command("go", "list", "-deps", "-test", "-json", pkgPath)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("codehash: go list %s: %v: %s", pkgPath, err, strings.TrimSpace(stderr.String()))
	}
	seen := map[string]pkg{}
	tested := "" // the package whose test binary this is: "X" of "X.test"
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", fmt.Errorf("codehash: go list %s: %w", pkgPath, err)
		}
		path := p.ImportPath
		if i := strings.Index(path, " ["); i >= 0 { // "p [p.test]": the package as its test builds it
			path = path[:i]
		}
		if !strings.HasPrefix(path, modulePrefix) {
			continue
		}
		if x, ok := strings.CutSuffix(path, ".test"); ok {
			tested = x
			continue
		}
		prev, ok := seen[path]
		if !ok || len(p.TestGoFiles)+len(p.XTestGoFiles) > len(prev.TestGoFiles)+len(prev.XTestGoFiles) {
			seen[path] = p
		}
	}
	if tested == "" {
		return "", fmt.Errorf("codehash: go list %s: no test binary listed", pkgPath)
	}
	paths := make([]string, 0, len(seen))
	for p := range seen {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	h := sha256.New()
	for _, path := range paths {
		p := seen[path]
		files := slices.Concat(p.GoFiles, p.CgoFiles, p.EmbedFiles, p.OtherFiles)
		if path == tested {
			files = slices.Concat(files, p.TestGoFiles, p.XTestGoFiles, p.TestEmbedFiles, p.XTestEmbedFiles)
		}
		slices.Sort(files)
		files = slices.Compact(files)
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				return "", fmt.Errorf("codehash: %w", err)
			}
			fmt.Fprintf(h, "%s/%s %d\n", path, f, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Commit returns the commit the checkout at dir is on, and whether its tracked
// files differ from it.
func Commit(dir string) (commit string, dirty bool, err error) {
	cmd := exec.Command("git", "rev-parse", "--short=12", "HEAD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", false, fmt.Errorf("codehash: git rev-parse: %w", err)
	}
	st := exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	st.Dir = dir
	changes, err := st.Output()
	if err != nil {
		return "", false, fmt.Errorf("codehash: git status: %w", err)
	}
	return strings.TrimSpace(string(out)), len(bytes.TrimSpace(changes)) > 0, nil
}
