package main

import (
	"path/filepath"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/lab/internal/codehash"
)

// stamper binds the cells of a run to the code they tested (package codehash): the
// commit, and per target a hash of the source its test package exercises.
type stamper struct {
	root   string
	commit string
	dirty  bool
}

func newStamper(root string) (*stamper, error) {
	commit, dirty, err := codehash.Commit(root)
	if err != nil {
		return nil, err
	}
	return &stamper{root: root, commit: commit, dirty: dirty}, nil
}

// of returns the code t's cells test.
func (s *stamper) of(t target) (*results.Code, error) {
	h, err := codehash.Of(filepath.Join(s.root, t.Dir), t.Pkg)
	if err != nil {
		return nil, err
	}
	return &results.Code{Commit: s.commit, Hash: h, Package: filepath.ToSlash(filepath.Join(t.Dir, t.Pkg)), Dirty: s.dirty}, nil
}

// bench returns the code the benchmarks measure: the lab's bench package and all it
// imports of dlock (every backend and peer).
func (s *stamper) bench() (*results.Code, error) {
	return s.of(target{Dir: "lab", Pkg: "./bench"})
}
