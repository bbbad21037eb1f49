// Command dlock runs commands under distributed locks and leader elections, and checks
// lock services against dlock's conformance suite: run, check (--doctor), elect,
// leader. It links the library, its backends, the suite and the Prometheus adapter
// only; the comparison of backends and libraries is the lab's command, dlock-lab
// (github.com/dlock-go/dlock/lab/cmd/dlock-lab).
//
//	dlock run --url redis://127.0.0.1:6379 --key nightly-backup -- ./backup.sh
//
// Run "dlock help" for the list of commands and "dlock help <command>" (or
// "dlock <command> --help") for one command's flags, examples and exit codes. The
// commands live in package cli, so that a binary of your own can add a backend of
// yours to them.
package main

import (
	"os"

	"github.com/dlock-go/dlock/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
