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
		Name:     "elect",
		Summary:  "run a command while this process is the leader of an election",
		Synopsis: "dlock elect [--url URL | --url-file FILE] --name NAME [--value V] [--ttl D] [--grace D] -- command [args...]",
		Help:     electHelp,
		Footer:   electFooter,
		Flags:    electFlags,
		Run:      electCommand,
	})
}

const electHelp = `
Campaign in the election NAME on the backend at URL, wait until this process is the
leader, run the command while it stays leader (the term is renewed every third of
--ttl), resign when the command exits, and exit with the command's exit code. Of all
the "dlock elect" with the same URL and NAME, on any machines, one runs its command
at a time; when its process dies, another is elected once the dead leader's term has
ended (its TTL, or its session on ZooKeeper).

The command runs under the same supervision as with "dlock run" (see dlock help
run): same signals, same process group, and it never runs on without the leadership:
SIGKILL at once when the backend says the term is gone, SIGTERM once less than --grace
is left before the term's deadline (its validity deadline, or a ZooKeeper session's
while the client is cut off) and SIGKILL at the deadline; dlock then exits 76. When the
command exits, what is left of its process group is killed before dlock resigns. Its
environment has:
  DLOCK_KEY, DLOCK_ELECTION  the election's name
  DLOCK_TOKEN                the term's fencing token: every later term has a larger one
  DLOCK_LEADER_VALUE         the value this process campaigned with

"dlock leader --url URL --name NAME" prints the current leader.

Backends with elections: mem, redis, mysql, zk, etcd (an etcd or ZooKeeper election
is shared with etcd's concurrency.Election or Curator's LeaderLatch: see
docs/election.md).

Examples:
  dlock elect --url etcd://10.0.0.1:2379 --name scheduler -- ./scheduler
  dlock elect --url redis://127.0.0.1:6379 --name cron --ttl 5s --value "$(hostname)" -- ./cron.sh
`

const electFooter = `
Exit codes: as for "dlock run" (75: not elected within --wait is not used: elect
waits until it is leader or gets a signal; nor are run's job codes 79 and 124), and
  69     the backend cannot be opened or reached, or has no leader election`

// electConfig holds the parsed flags of "dlock elect".
type electConfig struct {
	src              urlSource
	url, name, value string
	ttl, grace       time.Duration
}

var electCfg electConfig

func electFlags(fs *flag.FlagSet) {
	electCfg = electConfig{}
	c := &electCfg
	c.src.register(fs)
	fs.StringVar(&c.name, "name", "", "election name (required): 1 to 255 bytes of UTF-8")
	fs.StringVar(&c.value, "value", "", "what this candidate campaigns with, shown by \"dlock leader\" (default: host name and process id)")
	fs.DurationVar(&c.ttl, "ttl", 0, "term TTL, renewed every ttl/3 (default: the backend's, 10s; ZooKeeper terms last as long as the session)")
	fs.DurationVar(&c.grace, "grace", 0, "SIGTERM the command once less than this is left before the term's deadline; SIGKILL at\nthe deadline; at most half the TTL (default: a third of the TTL; for ZooKeeper, half of what\nis left before the ensemble may expire the session when the client is cut off, at most 10s)")
}

// electCommand is "dlock elect".
func electCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("elect")
	c := electCfg
	argv := fs.Args()
	var err error
	if c.url, err = c.src.resolve(); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	switch {
	case c.name == "":
		return cmd.UsageError(os.Stderr, "--name is required")
	case len(argv) == 0:
		return cmd.UsageError(os.Stderr, "no command given (put it after --)")
	}
	if msg := graceError(c.grace, c.ttl, c.url); msg != "" {
		return cmd.UsageError(os.Stderr, msg)
	}
	if err := dlock.ValidateKey(c.name); err != nil {
		return cmd.UsageError(os.Stderr, "--name: "+err.Error())
	}
	if c.value == "" {
		host, _ := os.Hostname()
		c.value = host + ":" + strconv.Itoa(os.Getpid())
	}
	opts := []dlock.Option{dlock.WithAutoRenew()}
	if c.ttl != 0 {
		if err := dlock.ValidateTTL(c.ttl); err != nil {
			return cmd.UsageError(os.Stderr, "--ttl: "+err.Error())
		}
		opts = append(opts, dlock.WithTTL(c.ttl))
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append(forwarded, syscall.SIGTSTP)...)
	defer signal.Stop(sigs)

	lease, locker, code := campaign(c, opts, sigs)
	if code != exitOK {
		return code
	}
	defer locker.Close()
	s := newSupervisor("elect", c.name, c.url, c.ttl, c.grace)
	s.env = []string{"DLOCK_ELECTION=" + c.name, "DLOCK_LEADER_VALUE=" + c.value}
	return s.run(argv, lease, sigs)
}

// openElection opens the backend at url and the election name on it; on failure it
// reports why on stderr (as command) and returns the exit code.
func openElection(ctx context.Context, command, url, name string) (*dlock.Election, dlock.Locker, int) {
	l, err := dlock.Open(ctx, url)
	if err != nil {
		if errors.Is(err, dlock.ErrInvalidURL) {
			return nil, nil, commands.Lookup(command).UsageError(os.Stderr, "--url: "+err.Error())
		}
		fmt.Fprintf(os.Stderr, "dlock %s: cannot open %s: %v\n", command, redact(url), err)
		return nil, nil, exitUnavailable
	}
	e, err := dlock.NewElection(l, name)
	if err != nil {
		l.Close()
		fmt.Fprintf(os.Stderr, "dlock %s: %v\n", command, err)
		return nil, nil, exitUnavailable
	}
	return e, l, exitOK
}

// campaign opens the backend and waits until this process leads, giving up on a
// signal.
func campaign(c electConfig, opts []dlock.Option, sigs <-chan os.Signal) (dlock.Lease, dlock.Locker, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := whileWaiting(sigs, cancel)
	e, l, code := openElection(ctx, "elect", c.url, c.name)
	var lease dlock.Lease
	var err error
	if code == exitOK {
		lease, err = e.Campaign(ctx, c.value, opts...)
	}
	caught := stop()
	switch {
	case caught != nil:
		if lease != nil {
			releaseQuietly(lease)
		}
		if l != nil {
			l.Close()
		}
		return nil, nil, interrupted("elect", caught)
	case code != exitOK:
		return nil, nil, code
	case err == nil:
		return lease, l, exitOK
	}
	l.Close()
	if errors.Is(err, dlock.ErrInvalidTTL) || errors.Is(err, dlock.ErrInvalidValue) {
		return nil, nil, commands.Lookup("elect").UsageError(os.Stderr, err.Error())
	}
	fmt.Fprintf(os.Stderr, "dlock elect: cannot campaign in %q on %s: %v\n", c.name, redact(c.url), err)
	return nil, nil, exitUnavailable
}
