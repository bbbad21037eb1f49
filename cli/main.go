// Package cli is the dlock command (cmd/dlock) as a library: Main runs it. A binary
// of your own that imports your backend package (which registers its URL scheme
// with dlock.Register) and calls Main gets every dlock command for that backend too —
// `check` runs the conformance suite on it against your servers:
//
//	package main
//
//	import (
//		"os"
//
//		"github.com/dlock-go/dlock/cli"
//		_ "example.com/yourlock" // registers yourlock://
//	)
//
//	func main() { os.Exit(cli.Main(os.Args[1:])) }
//
// Every built-in backend is registered too. Run "dlock help" for the list of commands
// and "dlock help <command>" for one command's flags, examples and exit codes.
//
// Each command lives in a file of its own (run.go, check.go, …) and adds itself to the
// command table (package internal/cmdline, shared with the lab's dlock-lab) with
// register from an init function; main.go only dispatches. The lab's commands
// (compare, bench, soak, docs) are not here: they are the dlock-lab command of the
// lab module (github.com/dlock-go/dlock/lab/cmd/dlock-lab), so that a binary built on
// this package links no server, container or benchmark code.
package cli

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/cmdline"
)

// Exit codes shared by the commands (package cmdline holds them for dlock and
// dlock-lab alike).
const (
	exitOK          = cmdline.ExitOK
	exitUsage       = cmdline.ExitUsage
	exitUnavailable = cmdline.ExitUnavailable
	exitSoftware    = cmdline.ExitSoftware
	exitOSErr       = cmdline.ExitOSErr
	exitTempFail    = cmdline.ExitTempFail
	exitLost        = cmdline.ExitLost
	exitSkipped     = cmdline.ExitSkipped
	exitTimedOut    = cmdline.ExitTimedOut
	exitCannotExec  = cmdline.ExitCannotExec
	exitNotFound    = cmdline.ExitNotFound
	exitSignalBase  = cmdline.ExitSignalBase
)

// command is one subcommand of dlock.
type command = cmdline.Command

// commands is dlock's command table.
var commands = &cmdline.Program{
	Name:  "dlock",
	Intro: "dlock runs commands under distributed locks.",
	Note: func(fs *flag.FlagSet) string {
		if fs.Lookup("url-file") != nil {
			return urlSourceHelp
		}
		return ""
	},
	Epilog: func(w io.Writer) {
		fmt.Fprintf(w, "\nLock URL schemes built in: %s\n", strings.Join(dlock.Schemes(), ", "))
	},
}

// register adds c to the command table. Called from init functions.
func register(c *command) { commands.Register(c) }

// Main runs the dlock command with args (os.Args[1:]) and returns the process's exit
// status (0, or a code the command's help lists). It writes to os.Stdout and
// os.Stderr. The "check" command re-executes the running binary, which must call
// Main: the child is recognized by its environment before Main parses anything.
func Main(args []string) int {
	if os.Getenv(checkChildEnv) != "" {
		// This process is the child of "dlock check" that runs the suite. It is
		// recognized here, not in an init function, so that every package of the
		// binary, a backend of the caller's included, has registered its scheme.
		return checkChild()
	}
	return dispatch(args, os.Stdout, os.Stderr)
}

// dispatch runs the command named by args[0] and returns the process exit code.
func dispatch(args []string, stdout, stderr io.Writer) int {
	return commands.Dispatch(args, stdout, stderr)
}
