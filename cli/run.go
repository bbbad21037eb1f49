package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
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
		Synopsis: "dlock run --url URL --key KEY [--ttl D] [--wait D] [--grace D] [--metrics-addr ADDR] -- command [args...]",
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

If the lease is lost while the command runs (the renewal finds the lock gone, or the
backend stays unreachable until the lease's validity ends), dlock says so on stderr,
sends SIGTERM to the command, SIGKILL after --grace, and exits 76.

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are passed
to the command. The command runs in a process group of its own, and signals go to that
whole group, so that a shell script's children are stopped along with it (and a lost
lease stops all of them). When dlock runs in the foreground of a terminal the command's
group is made the terminal's foreground group, so Ctrl-C and Ctrl-Z reach the command
directly, exactly once. A signal that arrives while dlock is still waiting for the lock
makes it give up and exit 128+n. If dlock itself is killed (SIGKILL), the command's main
process is killed too (Linux parent-death signal); its own children are not.

Examples:
  dlock run --url redis://127.0.0.1:6379 --key backup -- ./backup.sh --full
  dlock run --url etcd://10.0.0.1:2379,10.0.0.2:2379 --key deploy --wait 5m -- make deploy
  dlock run --url zk://zk1:2181/locks --key cron/report --wait 0 -- ./report.sh

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
  76     the lease was lost while the command ran; the command was terminated
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
}

var runCfg runConfig

func runFlags(fs *flag.FlagSet) {
	runCfg = runConfig{wait: waitFlag{forever: true}}
	c := &runCfg
	c.src.register(fs)
	fs.StringVar(&c.key, "key", "", "lock name (required): 1 to 255 bytes of UTF-8")
	fs.DurationVar(&c.ttl, "ttl", 0, "lease TTL; the lease is renewed every ttl/3 while the command runs\n(default: the backend's, 10s; ZooKeeper and GET_LOCK leases last as long as the session and ignore it)")
	fs.Var(&c.wait, "wait", "how long to wait for the lock: a `duration` such as 30s, 0 to try once, or forever")
	fs.DurationVar(&c.grace, "grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL to the command")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics while running, e.g. 127.0.0.1:9464\n(port 0 picks a free port and prints the address on stderr)")
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
	cmd := commands["run"]
	c := runCfg
	argv := fs.Args()
	var err error
	if c.url, err = c.src.resolve(); err != nil {
		return cmd.usageError(os.Stderr, err.Error())
	}
	switch {
	case c.key == "":
		return cmd.usageError(os.Stderr, "--key is required")
	case len(argv) == 0:
		return cmd.usageError(os.Stderr, "no command given (put it after --)")
	case c.grace < 0:
		return cmd.usageError(os.Stderr, "--grace must not be negative")
	}
	if err := dlock.ValidateKey(c.key); err != nil {
		return cmd.usageError(os.Stderr, "--key: "+err.Error())
	}
	var opts []dlock.Option
	if c.ttl != 0 {
		if err := dlock.ValidateTTL(c.ttl); err != nil {
			return cmd.usageError(os.Stderr, "--ttl: "+err.Error())
		}
		opts = append(opts, dlock.WithTTL(c.ttl))
	}
	opts = append(opts, dlock.WithAutoRenew())

	// Catch the forwarded signals from the start: before the command runs they end the
	// wait for the lock instead of killing dlock while it may hold the lock.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
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
	return runLocked(c, argv, lease, sigs)
}

// acquire opens the backend and takes the lock, giving up on --wait or on a signal.
func acquire(c runConfig, opts []dlock.Option, obs dlock.Observer, sigs <-chan os.Signal) (dlock.Lease, dlock.Locker, int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var caught os.Signal
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case caught = <-sigs:
			cancel()
		case <-stopWatch:
		}
	}()
	stop := func() { close(stopWatch); <-watchDone }

	l, err := dlock.Open(ctx, c.url)
	if err != nil {
		stop()
		if caught != nil {
			return nil, nil, interrupted(caught)
		}
		if errors.Is(err, dlock.ErrInvalidURL) {
			return nil, nil, commands["run"].usageError(os.Stderr, "--url: "+err.Error())
		}
		fmt.Fprintf(os.Stderr, "dlock run: cannot open %s: %v\n", redact(c.url), err)
		return nil, nil, exitUnavailable
	}
	if obs != nil {
		l = dlock.Instrument(l, obs)
	}
	var lease dlock.Lease
	switch {
	case c.wait.forever:
		lease, err = l.Acquire(ctx, c.key, opts...)
	case c.wait.d == 0:
		lease, err = l.TryAcquire(ctx, c.key, opts...)
	default:
		wctx, wcancel := context.WithTimeout(ctx, c.wait.d)
		lease, err = l.Acquire(wctx, c.key, opts...)
		wcancel()
	}
	stop()
	if caught != nil {
		if err == nil {
			releaseQuietly(lease)
		}
		l.Close()
		return nil, nil, interrupted(caught)
	}
	if err == nil {
		return lease, l, exitOK
	}
	l.Close()
	switch {
	case errors.Is(err, dlock.ErrInvalidKey), errors.Is(err, dlock.ErrInvalidTTL):
		return nil, nil, commands["run"].usageError(os.Stderr, err.Error())
	case errors.Is(err, dlock.ErrNotAcquired):
		fmt.Fprintf(os.Stderr, "dlock run: lock %q not acquired within --wait %v: %v\n", c.key, &c.wait, err)
		return nil, nil, exitTempFail
	}
	fmt.Fprintf(os.Stderr, "dlock run: cannot acquire %q on %s: %v\n", c.key, redact(c.url), err)
	return nil, nil, exitUnavailable
}

func interrupted(s os.Signal) int {
	fmt.Fprintf(os.Stderr, "dlock run: %v while waiting for the lock; giving up\n", s)
	return exitSignalBase + int(s.(syscall.Signal))
}

// runLocked runs the command while lease is held and returns dlock's exit code.
func runLocked(c runConfig, argv []string, lease dlock.Lease, sigs <-chan os.Signal) int {
	child := exec.Command(argv[0], argv[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.Env = append(os.Environ(), "DLOCK_KEY="+c.key, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10))
	tty := foregroundTTY()
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if tty != nil {
		child.SysProcAttr.Foreground = true
		child.SysProcAttr.Ctty = 0 // the child's stdin, which is the terminal
	}
	if err := child.Start(); err != nil {
		releaseQuietly(lease)
		fmt.Fprintf(os.Stderr, "dlock run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	pgid := child.Process.Pid
	var status syscall.WaitStatus
	var waitErr error
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		status, waitErr = waitChild(child, tty)
	}()
	if tty != nil {
		defer tty.restore()
	}

	lost := false
	var kill <-chan time.Time
	leaseDone := lease.Done()
loop:
	for {
		select {
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			lost = true
			fmt.Fprintf(os.Stderr, "dlock run: lease on %q lost: %v; sending SIGTERM to the command, SIGKILL in %v\n", c.key, lease.Err(), c.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(c.grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(os.Stderr, "dlock run: the command did not exit %v after SIGTERM; sending SIGKILL\n", c.grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case <-exited:
			break loop
		}
	}
	if lost {
		// The command is done but what it started may not be: nothing may go on
		// working without the lock.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return exitLost
	}
	if waitErr != nil {
		releaseQuietly(lease)
		fmt.Fprintf(os.Stderr, "dlock run: waiting for the command: %v\n", waitErr)
		return exitSoftware
	}
	code := exitCode(status)
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			fmt.Fprintf(os.Stderr, "dlock run: lease on %q was lost before the command finished: %v\n", c.key, err)
			return exitLost
		}
		fmt.Fprintf(os.Stderr, "dlock run: warning: release of %q failed (it frees itself when its TTL ends): %v\n", c.key, err)
	}
	return code
}

// exitCode is the shell's view of how the command ended.
func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func releaseQuietly(l dlock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = l.Release(ctx)
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
		return nil, nil, commands["run"].usageError(os.Stderr, "--metrics-addr: "+err.Error())
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
