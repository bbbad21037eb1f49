// Package cmdline is the command table that dlock's two commands share: the user's
// dlock (package cli: run, check, elect, leader) and the lab's dlock-lab (compare,
// bench, soak, docs). A Program holds the subcommands; Dispatch parses one command
// line, prints help and usage errors the same way for both, and returns the exit
// code. The exit codes follow sysexits(3) so that they are unlikely to clash with a
// child command's own.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit codes shared by the commands. Where a command runs a child, its exit status is
// passed through unless dlock itself failed.
const (
	ExitOK          = 0
	ExitUsage       = 64  // EX_USAGE: bad flags, missing arguments, a malformed URL or key
	ExitUnavailable = 69  // EX_UNAVAILABLE: cannot open or reach the lock backend
	ExitSoftware    = 70  // EX_SOFTWARE: an internal error of dlock
	ExitOSErr       = 71  // EX_OSERR: cannot listen, cannot write a file
	ExitTempFail    = 75  // EX_TEMPFAIL: the lock was not acquired within --wait; a busy machine
	ExitLost        = 76  // the lease was lost while the command ran
	ExitSkipped     = 79  // dlock run --skip-if-held: another holds the lock; the command did not run
	ExitTimedOut    = 124 // dlock run --at-most: the command ran too long and was stopped (timeout(1)'s code)
	ExitCannotExec  = 126
	ExitNotFound    = 127
	ExitSignalBase  = 128 // 128+n: the command (or dlock, before the command started) died of signal n
)

// Command is one subcommand.
type Command struct {
	Name     string
	Summary  string // one line for "<program> help"
	Synopsis string // "dlock run --url URL --key K [flags] -- command [args...]"
	// Help is printed after the synopsis by --help: what the command does, examples.
	Help string
	// Footer is printed after the flags by --help (exit codes, notes).
	Footer string
	// Flags declares the command's flags on fs.
	Flags func(fs *flag.FlagSet)
	// Run runs the command with the parsed flag set and returns the exit code.
	Run func(fs *flag.FlagSet) int

	prog *Program
}

// Program is a command made of subcommands. Its zero value is not usable: set Name
// and Intro. Register and Dispatch are not safe for concurrent use with each other
// (commands register from init functions).
type Program struct {
	Name  string // the binary's name, in every message
	Intro string // the first line of the top help
	// Note, when set, returns text printed after a command's help (before its flags)
	// for its flag set, or "".
	Note func(fs *flag.FlagSet) string
	// Epilog, when set, writes lines at the end of the top help.
	Epilog func(w io.Writer)

	commands map[string]*Command
}

// Register adds c to the table. It panics if a command of that name is there
// already (a programming error).
func (p *Program) Register(c *Command) {
	if p.commands == nil {
		p.commands = map[string]*Command{}
	}
	if _, dup := p.commands[c.Name]; dup {
		panic(p.Name + ": command registered twice: " + c.Name)
	}
	c.prog = p
	p.commands[c.Name] = c
}

// Lookup returns the command named name, or nil.
func (p *Program) Lookup(name string) *Command { return p.commands[name] }

// Names returns the names of the registered commands, sorted.
func (p *Program) Names() []string {
	names := make([]string, 0, len(p.commands))
	for n := range p.commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Dispatch runs the command named by args[0] with the rest of args and returns the
// process exit code: the command's, ExitOK for help, ExitUsage for an unknown
// command or a flag that does not parse.
func (p *Program) Dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		p.usage(stderr)
		return ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			p.usage(stdout)
			return ExitOK
		}
		c, ok := p.commands[rest[0]]
		if !ok {
			fmt.Fprintf(stderr, "%s help: unknown command %q\n\n", p.Name, rest[0])
			p.usage(stderr)
			return ExitUsage
		}
		c.usage(stdout, c.FlagSet())
		return ExitOK
	}
	c, ok := p.commands[name]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", p.Name, name)
		p.usage(stderr)
		return ExitUsage
	}
	fs := c.FlagSet()
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(stdout, fs)
			return ExitOK
		}
		return c.UsageError(stderr, err.Error())
	}
	return c.Run(fs)
}

// FlagSet returns a fresh flag set with c's flags; parse errors are returned, not
// printed.
func (c *Command) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.prog.Name+" "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

// UsageError prints msg and a pointer to --help, and returns ExitUsage.
func (c *Command) UsageError(w io.Writer, msg string) int {
	fmt.Fprintf(w, "%s %s: %s\nRun '%s %s --help' for usage.\n", c.prog.Name, c.Name, msg, c.prog.Name, c.Name)
	return ExitUsage
}

// usage prints c's full help to w.
func (c *Command) usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.Synopsis, strings.TrimSpace(c.Help))
	if c.prog.Note != nil {
		if n := c.prog.Note(fs); n != "" {
			fmt.Fprintf(w, "%s\n", n)
		}
	}
	fmt.Fprintf(w, "\nFlags:\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if c.Footer != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Footer))
	}
}

// usage prints the top help: the commands and their summaries.
func (p *Program) usage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  %s <command> [flags] [arguments]\n\nCommands:\n", p.Intro, p.Name)
	for _, n := range p.Names() {
		fmt.Fprintf(w, "  %-10s %s\n", n, p.commands[n].Summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show this text, or a command's help: "+p.Name+" help <command>")
	if p.Epilog != nil {
		p.Epilog(w)
	}
	fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags, examples and exit codes.\n", p.Name)
}
