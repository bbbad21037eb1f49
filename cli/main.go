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
// Every built-in backend and peer is registered too. Run "dlock help" for the list of
// commands and "dlock help <command>" for one command's flags, examples and exit codes.
//
// Each command lives in a file of its own (run.go, check.go, …) and adds itself to the
// command table with register from an init function; main.go only dispatches.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/servers"

	"github.com/dlock-go/dlock"
)

// Exit codes shared by the commands. Where a command runs a child, its exit status is
// passed through unless dlock itself failed; the values below follow sysexits(3) so
// that they are unlikely to clash with a child's own codes.
const (
	exitOK          = 0
	exitUsage       = 64 // EX_USAGE: bad flags, missing arguments, a malformed URL or key
	exitUnavailable = 69 // EX_UNAVAILABLE: cannot open or reach the lock backend
	exitSoftware    = 70 // EX_SOFTWARE: an internal error of dlock
	exitOSErr       = 71 // EX_OSERR: cannot listen on --metrics-addr
	exitTempFail    = 75 // EX_TEMPFAIL: the lock was not acquired within --wait
	exitLost        = 76 // the lease was lost while the command ran
	exitCannotExec  = 126
	exitNotFound    = 127
	exitSignalBase  = 128 // 128+n: the command (or dlock, before the command started) died of signal n
)

// command is one subcommand of dlock.
type command struct {
	Name     string
	Summary  string // one line for "dlock help"
	Synopsis string // "dlock run --url URL --key K [flags] -- command [args...]"
	// Help is printed after the synopsis by --help: what the command does, examples.
	Help string
	// Footer is printed after the flags by --help (exit codes, notes).
	Footer string
	// Flags declares the command's flags on fs.
	Flags func(fs *flag.FlagSet)
	// Run runs the command with the parsed flag set and returns the exit code.
	Run func(fs *flag.FlagSet) int
}

var commands = map[string]*command{}

// register adds c to the command table. Called from init functions.
func register(c *command) {
	if _, dup := commands[c.Name]; dup {
		panic("dlock: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// Main runs the dlock command with args (os.Args[1:]) and returns the process's exit
// status (0, or a code the command's help lists). It writes to os.Stdout and
// os.Stderr. The "check" command re-executes the running binary, which must call
// Main: the child is recognized by its environment before Main parses anything.
func Main(args []string) int {
	// The benchmarks' etcd member runs in a process of this binary of its own.
	servers.EtcdMemberMain()
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
	if len(args) == 0 {
		topUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			topUsage(stdout)
			return exitOK
		}
		c, ok := commands[rest[0]]
		if !ok {
			fmt.Fprintf(stderr, "dlock help: unknown command %q\n\n", rest[0])
			topUsage(stderr)
			return exitUsage
		}
		c.usage(stdout, c.flagSet())
		return exitOK
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "dlock: unknown command %q\n\n", name)
		topUsage(stderr)
		return exitUsage
	}
	fs := c.flagSet()
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(stdout, fs)
			return exitOK
		}
		return c.usageError(stderr, err.Error())
	}
	return c.Run(fs)
}

// flagSet returns a fresh flag set with c's flags; parse errors are returned, not printed.
func (c *command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("dlock "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

// usageError prints msg and a pointer to --help, and returns exitUsage.
func (c *command) usageError(w io.Writer, msg string) int {
	fmt.Fprintf(w, "dlock %s: %s\nRun 'dlock %s --help' for usage.\n", c.Name, msg, c.Name)
	return exitUsage
}

// usage prints c's full help to w.
func (c *command) usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.Synopsis, strings.TrimSpace(c.Help))
	if fs.Lookup("url-file") != nil {
		fmt.Fprintf(w, "%s\n", urlSourceHelp)
	}
	fmt.Fprintf(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if c.Footer != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Footer))
	}
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "dlock runs commands under distributed locks.\n\nUsage:\n  dlock <command> [flags] [arguments]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this text, or a command's help: dlock help <command>")
	fmt.Fprintf(w, "\nLock URL schemes built in: %s\n", strings.Join(dlock.Schemes(), ", "))
	fmt.Fprintf(w, "\nRun 'dlock <command> --help' for a command's flags, examples and exit codes.\n")
}
