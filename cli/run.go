package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockprom"
)

func init() {
	register(&command{
		Name:     "run",
		Summary:  "run a command while holding a lock (like flock(1) across machines)",
		Synopsis: "dlock run --url URL --key KEY [--limit N | --shared | --exclusive] [--ttl D] [--wait D | --skip-if-held] [--at-least D] [--at-most D] [--grace D] [--metrics-addr ADDR] -- command [args...]",
		Help:     runHelp,
		Footer:   runFooter,
		Flags:    runFlags,
		Run:      runCommand,
	})
}

const runHelp = `
Acquire the lock KEY on the backend at URL, run the command while the lease is kept
alive (renewed every third of --ttl), release the lock when the command exits, and exit
with the command's exit code. Two "dlock run" with the same URL and KEY, on any
machines, never run their commands at the same time.

The command gets two environment variables:
  DLOCK_KEY    the lock's key
  DLOCK_TOKEN  the fencing token of this grant: for one key, every later grant has a
               larger token (0 where the backend cannot fence). Pass it to the resource
               you protect and have it reject writes with a token lower than one it has
               seen: that is what keeps a paused or partitioned holder from doing harm.

The command never runs on without the lock; every kill goes to its whole process
group. When the backend says the lock is gone (deleted, taken over, the session
expired, the connection killed), the command gets SIGKILL at once. While renewals
succeed the lease keeps more than half its TTL ahead; when the backend stops
confirming it (it does not answer) and less than --grace is left before the lease's
deadline — its validity deadline, or a ZooKeeper session's while the client is cut
off — dlock sends SIGTERM, and at the deadline, which comes before the backend can
free the lock and grant it to anyone else, SIGKILL. A GET_LOCK lease given up while
the server still keeps the lock gets SIGTERM at once and SIGKILL after --grace, before
the server can free it. dlock then says why the lease ended and exits 76. When the
command exits, what is left of its process group is killed, and gone, before the
lock is released. docs/run.md has the measured margin between the command's last
action and the next holder's first on every backend.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are passed
to the command. The command runs in a process group of its own, and signals go to that
whole group, so that a shell script's children are stopped along with it (and a lost
lease stops all of them). When dlock runs in the foreground of a terminal the command's
group is made the terminal's foreground group, so Ctrl-C and Ctrl-Z reach the command
directly, exactly once; Ctrl-Z (or SIGTSTP to dlock) stops dlock and the command
together, and when they are continued dlock checks the lease before it lets the
command go on (a lease that ended meanwhile: the command is killed, exit 76). A
signal that arrives while dlock is still waiting for the lock makes it give up and
exit 128+n (SIGTSTP stops it instead). A SIGSTOP sent to dlock's process alone cannot
be caught: it stops the renewals but not the command, so stop the whole job (kill
-STOP -PGID, or Ctrl-Z) instead. If dlock itself is killed (SIGKILL), the command's main
process is killed too (Linux parent-death signal); its own children are not.

Scheduled jobs (the same job started by cron or a timer on many machines, to run
once per interval):
  --skip-if-held  when another holds the lock, exit 79 at once: the job runs
                  elsewhere (not with --wait, which waits for the lock instead).
  --at-least D    keep the lock, renewed, until D after the command started even if it
                  ends sooner, so that a machine whose timer fires a little later finds
                  it held and skips; dlock still exits with the command's code. A lease
                  lost in this hold-over, after the command finished, is reported on
                  stderr and does not change the exit code (another run may start
                  early); one lost while the command ran is exit 76 as always. SIGINT,
                  SIGTERM, SIGHUP or SIGQUIT during the hold-over (or passed to the
                  command before it) end it and release the lock.
  --at-most D     once the command has run D, send it SIGTERM, then SIGKILL after
                  --grace (default: a third of the TTL; 10s for session leases),
                  release the lock and exit 124.
  Both are counted from the command's start; --at-least must not exceed --at-most,
  and each is at most a year. docs/run.md has cron, systemd and Kubernetes examples.

Examples:
  dlock run --url redis://127.0.0.1:6379 --key backup -- ./backup.sh --full
  dlock run --url etcd://10.0.0.1:2379,10.0.0.2:2379 --key deploy --wait 5m -- make deploy
  dlock run --url zk://zk1:2181/locks --key cron/report --wait 0 -- ./report.sh
  dlock run --url redis://10.0.0.5:6379 --key hourly-sync --skip-if-held --at-least 5m --at-most 50m -- ./sync.sh

URL examples (see docs/ for what each backend guarantees):
  mem://                                    in-process only: useful for trying dlock out
  redis://[user:pass@]host:6379[/db]        SET NX PX with renewal and fencing counter
  redis+setnx://host:6379?variant=getset    the classic SETNX variants (unsafe, for study)
  mysql://user:pass@host:3306/db            a row in a table with a unique index
  mysql+getlock://user:pass@host:3306/db    MySQL GET_LOCK (held by the connection)
  zk://host1:2181,host2:2181/root           ZooKeeper ephemeral sequential nodes
  redlock://h1:6379,h2:6379,h3:6379         Redlock over independent Redis masters
  etcd://host1:2379,host2:2379/prefix       etcd lease + revision queue
`

const runFooter = `
Exit codes:
  N      the command exited with code N
  128+N  the command died of signal N (or dlock got signal N while waiting for the lock)
  64     usage error: bad flags, missing --url/--key/command, malformed URL or key,
         TTL the backend does not accept
  69     the backend cannot be opened or reached
  71     cannot listen on --metrics-addr
  75     the lock was not acquired within --wait
  76     the lease was lost (or reached its deadline) while the command ran; the command
         and its process group were killed, and stderr says why
  79     --skip-if-held: another holds the lock; the command did not run
  124    --at-most: the command ran that long and was stopped (SIGTERM, then SIGKILL);
         the lock was released (timeout(1)'s code)
  126    the command was found but could not be started
  127    the command was not found
The command's own exit code is passed through unchanged even where it equals one of
dlock's codes; a script that must tell them apart can check dlock's stderr, where dlock
always explains its own failures.`

// runConfig holds the parsed flags of "dlock run".
type runConfig struct {
	src         urlSource
	url, key    string
	ttl, grace  time.Duration
	wait        waitFlag
	metricsAddr string
	primitive   primitiveFlags // --limit, --shared, --exclusive (run_primitives.go)
	job         jobFlags       // --at-least, --at-most, --skip-if-held (run_jobs.go)
}

var runCfg runConfig

func runFlags(fs *flag.FlagSet) {
	runCfg = runConfig{wait: waitFlag{forever: true}}
	c := &runCfg
	c.src.register(fs)
	fs.StringVar(&c.key, "key", "", "lock name (required): 1 to 255 bytes of UTF-8")
	fs.DurationVar(&c.ttl, "ttl", 0, "lease TTL; the lease is renewed every ttl/3 while the command runs\n(default: the backend's, 10s; ZooKeeper and GET_LOCK leases last as long as the session and ignore it)")
	fs.Var(&c.wait, "wait", "how long to wait for the lock: a `duration` such as 30s, 0 to try once, or forever")
	fs.DurationVar(&c.grace, "grace", 0, "SIGTERM the command once less than this is left before the lease's deadline; SIGKILL at\nthe deadline; at most half the TTL (default: a third of the TTL; for ZooKeeper and GET_LOCK,\nhalf of what is left before the server may free the lock when the trouble starts, at most 10s)")
	c.primitive.register(fs)
	c.job.register(fs)
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics while running, e.g. 127.0.0.1:9464\n(port 0 picks a free port and prints the address on stderr)")
}

// perLeaseURL reports whether rawURL's backend declares per-lease TTLs (true when
// it declares nothing).
func perLeaseURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return true
	}
	caps, err := dlock.Declared(u)
	return err != nil || caps.PerLeaseTTL
}

// waitFlag is the value of --wait: a duration >= 0 or "forever".
type waitFlag struct {
	forever bool
	d       time.Duration
}

func (w *waitFlag) String() string {
	if w.forever {
		return "forever"
	}
	return w.d.String()
}

func (w *waitFlag) Set(s string) error {
	if s == "forever" {
		*w = waitFlag{forever: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 0, or forever")
	}
	if d < 0 {
		return fmt.Errorf("negative wait %v (use 0 to try once, or forever)", d)
	}
	*w = waitFlag{d: d}
	return nil
}

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// releaseTimeout bounds the release after the command exits.
const releaseTimeout = 10 * time.Second

// runCommand is "dlock run".
func runCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("run")
	c := runCfg
	argv := fs.Args()
	var err error
	if c.url, err = c.src.resolve(); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	switch {
	case c.key == "":
		return cmd.UsageError(os.Stderr, "--key is required")
	case len(argv) == 0:
		return cmd.UsageError(os.Stderr, "no command given (put it after --)")
	}
	if msg := graceError(c.grace, c.ttl, c.url); msg != "" {
		return cmd.UsageError(os.Stderr, msg)
	}
	if err := dlock.ValidateKey(c.key); err != nil {
		return cmd.UsageError(os.Stderr, "--key: "+err.Error())
	}
	if msg := c.primitive.check(); msg != "" {
		return cmd.UsageError(os.Stderr, msg)
	}
	waitSet := false
	fs.Visit(func(f *flag.Flag) { waitSet = waitSet || f.Name == "wait" })
	if msg := c.job.check(waitSet); msg != "" {
		return cmd.UsageError(os.Stderr, msg)
	}
	var opts []dlock.Option
	if c.ttl != 0 {
		if err := dlock.ValidateTTL(c.ttl); err != nil {
			return cmd.UsageError(os.Stderr, "--ttl: "+err.Error())
		}
		opts = append(opts, dlock.WithTTL(c.ttl))
	}
	// The holder record (host, pid, "dlock run") lets "dlock inspect" say which
	// machine and process hold the lock, on the stores that keep it.
	opts = append(opts, dlock.WithAutoRenew(), dlock.WithHolder(dlock.ThisProcess("dlock run")))

	// Catch the forwarded signals from the start: before the command runs they end the
	// wait for the lock instead of killing dlock while it may hold the lock.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append(forwarded, syscall.SIGTSTP)...)
	defer signal.Stop(sigs)

	var obs dlock.Observer
	if c.metricsAddr != "" {
		o, stop, code := serveMetrics(c.metricsAddr)
		if code != exitOK {
			return code
		}
		defer stop()
		obs = o
	}

	lease, locker, code := acquire(c, opts, obs, sigs)
	if code != exitOK {
		return code
	}
	defer locker.Close()
	s := newSupervisor("run", c.key, c.url, c.ttl, c.grace)
	s.atLeast, s.atMost = c.job.atLeast.d, c.job.atMost.d
	return s.run(argv, lease, sigs)
}

// newSupervisor is the supervisor of a command under a lease of ttl (0: the default)
// on rawURL's backend, with --grace grace (0: the default).
func newSupervisor(name, key, rawURL string, ttl, grace time.Duration) supervisor {
	s := supervisor{name: name, key: key, grace: grace}
	if perLeaseURL(rawURL) {
		s.ttl = runConfig{ttl: ttl}.ttlOrDefault()
	}
	return s
}

// graceError says what is wrong with --grace for a lease of ttl (0: the default)
// on rawURL's backend ("" when nothing is).
func graceError(grace, ttl time.Duration, rawURL string) string {
	ttl = runConfig{ttl: ttl}.ttlOrDefault()
	switch {
	case grace < 0:
		return "--grace must not be negative"
	case grace > maxGrace(ttl) && perLeaseURL(rawURL):
		return fmt.Sprintf("--grace %v is too long for a TTL of %v: at most %v (half the TTL), or a healthy command would get SIGTERM before a regular renewal (every third of the TTL) moved the deadline", grace, ttl, maxGrace(ttl))
	}
	return ""
}

// maxGrace is the longest --grace for a per-lease TTL: half of it. A regular renewal
// starts a third of the TTL after the previous one and leaves the lease two thirds of
// the TTL less the drift allowance and two round trips; half the TTL leaves a sixth
// of it for those, so a healthy command is never warned.
func maxGrace(ttl time.Duration) time.Duration { return ttl / 2 }

func (c runConfig) ttlOrDefault() time.Duration {
	if c.ttl > 0 {
		return c.ttl
	}
	return dlock.DefaultTTL
}

// acquire opens the backend and takes the lock, giving up on --wait or on a signal.
func acquire(c runConfig, opts []dlock.Option, obs dlock.Observer, sigs <-chan os.Signal) (dlock.Lease, dlock.Locker, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := whileWaiting(sigs, cancel)

	l, err := dlock.Open(ctx, c.url)
	if err != nil {
		if caught := stop(); caught != nil {
			return nil, nil, interrupted("run", caught)
		}
		if errors.Is(err, dlock.ErrInvalidURL) {
			return nil, nil, commands.Lookup("run").UsageError(os.Stderr, "--url: "+err.Error())
		}
		fmt.Fprintf(os.Stderr, "dlock run: cannot open %s: %v\n", redact(c.url), err)
		return nil, nil, exitUnavailable
	}
	if obs != nil {
		l = dlock.Instrument(l, obs)
	}
	var lease dlock.Lease
	target, err := c.primitive.target(l, c.key)
	switch {
	case err != nil:
	case c.job.skipIfHeld:
		lease, err = target.TryAcquire(ctx, opts...)
	case c.wait.forever:
		lease, err = target.Acquire(ctx, opts...)
	case c.wait.d == 0:
		lease, err = target.TryAcquire(ctx, opts...)
	default:
		wctx, wcancel := context.WithTimeout(ctx, c.wait.d)
		lease, err = target.Acquire(wctx, opts...)
		wcancel()
	}
	if caught := stop(); caught != nil {
		if err == nil {
			releaseQuietly(lease)
		}
		l.Close()
		return nil, nil, interrupted("run", caught)
	}
	if err == nil {
		return lease, l, exitOK
	}
	l.Close()
	switch {
	case errors.Is(err, dlock.ErrInvalidKey), errors.Is(err, dlock.ErrInvalidTTL), errors.Is(err, dlock.ErrInvalidLimit), errors.Is(err, errors.ErrUnsupported):
		return nil, nil, commands.Lookup("run").UsageError(os.Stderr, err.Error())
	case errors.Is(err, dlock.ErrNotAcquired) && c.job.skipIfHeld:
		fmt.Fprintf(os.Stderr, "dlock run: lock %q is held by another: skipped (--skip-if-held)\n", c.key)
		return nil, nil, exitSkipped
	case errors.Is(err, dlock.ErrNotAcquired):
		fmt.Fprintf(os.Stderr, "dlock run: lock %q not acquired within --wait %v: %v\n", c.key, &c.wait, err)
		return nil, nil, exitTempFail
	}
	fmt.Fprintf(os.Stderr, "dlock run: cannot acquire %q on %s: %v\n", c.key, redact(c.url), err)
	return nil, nil, exitUnavailable
}

// whileWaiting watches sigs while dlock waits for a lease: SIGTSTP stops dlock, as
// its default action would; any other signal cancels the wait. stop ends the watch
// and returns the signal that cancelled the wait (nil if none did).
func whileWaiting(sigs <-chan os.Signal, cancel context.CancelFunc) (stop func() os.Signal) {
	var caught os.Signal
	watchDone, stopWatch := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTSTP {
					_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
					continue
				}
				caught = s
				cancel()
			case <-stopWatch:
			}
			return
		}
	}()
	return func() os.Signal {
		close(stopWatch)
		<-watchDone
		return caught
	}
}

// interrupted reports that dlock command gave up its wait on signal s and returns
// the exit code.
func interrupted(command string, s os.Signal) int {
	fmt.Fprintf(os.Stderr, "dlock %s: %v while waiting for the lease; giving up\n", command, s)
	return exitSignalBase + int(s.(syscall.Signal))
}

// redact hides a password in a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the backend"
	}
	return u.Redacted()
}

// serveMetrics serves the Observer's metrics (and the Go runtime's) on addr. It
// returns the Observer, a function that stops the server, and an exit code.
func serveMetrics(addr string) (dlock.Observer, func(), int) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	obs, err := dlockprom.New(reg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: metrics: %v\n", err)
		return nil, nil, exitSoftware
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, nil, commands.Lookup("run").UsageError(os.Stderr, "--metrics-addr: "+err.Error())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: --metrics-addr: %v\n", err)
		return nil, nil, exitOSErr
	}
	if _, port, _ := net.SplitHostPort(addr); port == "0" {
		fmt.Fprintf(os.Stderr, "dlock run: metrics at http://%s/metrics\n", ln.Addr())
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return obs, func() { srv.Close() }, exitOK
}
