package codehash

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOf: the hash of a test package is stable, and changes when a file of a package
// it exercises changes (here: the root package, which every backend's test imports).
func TestOf(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	h1, err := Of(root, "./backends/memlock")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := Of(root, "./backends/memlock")
	if err != nil || h1 != h2 {
		t.Fatalf("two hashes of the same tree: %s, %s (%v)", h1, h2, err)
	}
	// A copy of the module with one file of the root package changed hashes otherwise.
	tmp := t.TempDir()
	if err := os.CopyFS(tmp, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(tmp, "retry.go")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, append(b, []byte("\n// changed\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	h3, err := Of(tmp, "./backends/memlock")
	if err != nil {
		t.Fatal(err)
	}
	if h3 == h1 {
		t.Fatalf("a changed root package left the hash of memlock's test unchanged: %s", h3)
	}
}
