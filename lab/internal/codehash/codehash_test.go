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
	change := func(name string) string {
		t.Helper()
		f := filepath.Join(tmp, name)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, []byte("\n// changed\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := Of(tmp, "./backends/memlock")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// Another package's tests are not in memlock's test binary: no change.
	if h := change("lease_test.go"); h != h1 {
		t.Fatalf("a changed test of the root package changed the hash of memlock's test: %s, was %s", h, h1)
	}
	// memlock's own tests are.
	h3 := change("backends/memlock/behaviour_test.go")
	if h3 == h1 {
		t.Fatalf("a changed memlock test left the hash of memlock's test unchanged: %s", h3)
	}
	// So is the code of the packages it imports.
	if h4 := change("retry.go"); h4 == h3 {
		t.Fatalf("a changed root package left the hash of memlock's test unchanged: %s", h4)
	}
}
