package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

func init() {
	register(&command{
		Name:     "leader",
		Summary:  "print the current leader of an election (--watch: every new one)",
		Synopsis: "dlock leader [--url URL | --url-file FILE] --name NAME [--watch]",
		Help:     leaderHelp,
		Footer:   leaderFooter,
		Flags:    leaderFlags,
		Run:      leaderCommand,
	})
}

const leaderHelp = `
Print the leader of the election NAME on the backend at URL as one line: the term's
fencing token, a tab, and the value the leader campaigned with ("dlock elect --value"),
escaped as in a Go string literal without its quotes: a backslash, a double quote, a
control character (newline, tab, escape, ...), a character that does not print and
each byte of invalid UTF-8 are written as \\, \", \n, \t, \x1b, \u202e, \xff and so on,
so that a value is always one field of one line (strconv.Unquote of the field in
double quotes gives it back); a value of printable characters prints as it is.
With --watch, print the current leader (if any) and then each new leader as it is
elected, in term order, until interrupted (SIGINT, SIGTERM).

Examples:
  dlock leader --url etcd://127.0.0.1:2379 --name scheduler
  dlock leader --url redis://127.0.0.1:6379 --name cron --watch
`

const leaderFooter = `
Exit codes:
  0      a leader was printed (--watch: interrupted)
  3      the election has no leader
  64     usage error
  69     the backend cannot be opened or reached, or has no leader election`

// exitNoLeader: "dlock leader" found no leader.
const exitNoLeader = 3

type leaderConfig struct {
	src       urlSource
	url, name string
	watch     bool
}

var leaderCfg leaderConfig

func leaderFlags(fs *flag.FlagSet) {
	leaderCfg = leaderConfig{}
	c := &leaderCfg
	c.src.register(fs)
	fs.StringVar(&c.name, "name", "", "election name (required)")
	fs.BoolVar(&c.watch, "watch", false, "print each new leader until interrupted")
}

func leaderCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("leader")
	c := leaderCfg
	var err error
	if c.url, err = c.src.resolve(); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	switch {
	case c.name == "":
		return cmd.UsageError(os.Stderr, "--name is required")
	case fs.NArg() > 0:
		return cmd.UsageError(os.Stderr, "unexpected arguments")
	}
	if err := dlock.ValidateKey(c.name); err != nil {
		return cmd.UsageError(os.Stderr, "--name: "+err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, l, code := openElection(ctx, "leader", c.url, c.name)
	if code != exitOK {
		return code
	}
	defer l.Close()
	if c.watch {
		for ld := range e.Observe(ctx) {
			fmt.Println(leaderLine(ld))
		}
		return exitOK
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ld, err := e.Leader(rctx)
	switch {
	case errors.Is(err, dlock.ErrNoLeader):
		fmt.Fprintf(os.Stderr, "dlock leader: %v\n", err)
		return exitNoLeader
	case err != nil:
		fmt.Fprintf(os.Stderr, "dlock leader: %v\n", err)
		return exitUnavailable
	}
	fmt.Println(leaderLine(ld))
	return exitOK
}

// leaderLine is the line "dlock leader" prints for ld: its token, a tab and its
// value escaped as in a Go string literal without the quotes, so that no value
// (a newline, terminal escapes) forges lines or fields that scripts parse.
func leaderLine(ld dlock.Leader) string {
	q := strconv.Quote(ld.Value)
	return strconv.FormatUint(ld.Token, 10) + "\t" + q[1:len(q)-1]
}
