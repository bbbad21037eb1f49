// Command dlock-lab is dlock's comparison lab: it puts every backend and the lock
// libraries people use today (the peers) side by side, on real servers, under real
// faults, and renders the report and the documents' generated parts.
//
//	dlock-lab compare   # the conformance suite, the fault campaign and the benchmarks; the report
//	dlock-lab bench     # the benchmarks alone
//	dlock-lab soak      # every backend under 64 clients, checking overlaps, stale tokens, leaks
//	dlock-lab docs      # the documents' generated tables, from the committed report
//
// It lives in the lab module (github.com/dlock-go/dlock/lab) with the peers, the
// benchmarks and the etcd member binary, so that the user's dlock (cmd/dlock) and a
// library user's module carry none of them. Run "dlock-lab help" for the commands and
// "dlock-lab help <command>" for one command's flags. make compare, make bench and
// make docs run it from the repository's root.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/cmdline"
)

// command is one subcommand of dlock-lab.
type command = cmdline.Command

// commands is dlock-lab's command table; each command adds itself from an init
// function of its file.
var commands = &cmdline.Program{
	Name:  "dlock-lab",
	Intro: "dlock-lab compares lock backends and libraries on real servers, under real faults.",
	Epilog: func(w io.Writer) {
		fmt.Fprintf(w, "\nLock URL schemes (backends and peers): %s\n", strings.Join(dlock.Schemes(), ", "))
	},
}

func register(c *command) { commands.Register(c) }

func main() { os.Exit(commands.Dispatch(os.Args[1:], os.Stdout, os.Stderr)) }
