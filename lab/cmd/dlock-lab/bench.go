package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/cmdline"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/lab/bench"
)

func init() {
	register(&command{
		Name:     "bench",
		Summary:  "measure every backend and the lock libraries people use today, side by side",
		Synopsis: "dlock-lab bench [--targets T,...] [--skip M,...] [--duration D] [--json] [--out FILE]",
		Help:     benchHelp,
		Footer:   benchFooter,
		Flags:    benchFlags,
		Run:      benchCommand,
	})
}

const benchHelp = `
Start one set of real servers (Redis, five independent Redis masters, MariaDB,
ZooKeeper, PostgreSQL, and one etcd member in a process of its own; addresses in
DLOCK_REDIS_ADDRS, DLOCK_REDLOCK_ADDRS, DLOCK_MYSQL_DSN, DLOCK_ZK_ADDRS,
DLOCK_ETCD_ADDRS and DLOCK_POSTGRES_URL are used instead
where set), build every dlock backend and every peer library (bsm/redislock, redsync,
etcd concurrency.Mutex, go-zookeeper zk.Lock, MySQL GET_LOCK) on them, and print one
Markdown table:

  uncontended acquire+release p50/p99, and the ratio to the store's raw round trips
  (measured in turn, round by round, so that both see the same load);
  contended hand-offs/s with --clients clients on one key, longest wait, longest/mean
  wait, Jain's fairness index;
  many-keys throughput (--many-clients clients over --keys keys);
  time until another client gets a lock whose holder vanished (its connections cut,
  never released), with the TTL or session timeout that frees it;
  heap allocations per acquire+release;
contended hand-offs/s and store requests per hand-off with 8, 32 and 100 waiters;
and the targets of issue 19 (ratios from this run) with whether each was met.

The uncontended and contended measurements run --repeat times (every target once
per repetition), and so do the scaling measurements (one target's in a row); each
row shows its median repetition and each target the median of its per-repetition
ratios. Before measuring, the bench waits up to --quiet-wait
for the one-minute load average to drop below --max-load and refuses to run if it
does not (exit 75), unless --force: results the project commits are quiet ones. The
load before and after is printed with the results.

Progress goes to stderr. Servers dlock starts are stopped when it exits. Absolute
times depend on the machine and its load: compare ratios within one run.

Examples:
  dlock-lab bench > results.md
  dlock-lab bench --targets redis,bsm/redislock --skip crash,manykeys --duration 1s
  dlock-lab bench --targets @etcd --json --out etcd.json
  dlock-lab bench --list
`

const benchFooter = `
Exit codes:
  0    every selected target was measured
  64   usage error: bad flags, an unknown target or measurement
  75   the machine stayed busy (load average at or above --max-load): nothing measured
  69   a server could not be started or reached (its targets are marked skipped)
  70   a measurement failed (the table shows what was measured, the errors follow it)
  128+N  interrupted by signal N (the results so far are printed)`

type benchConfig struct {
	targets, skip string
	cfg           bench.Config
	json, list    bool
	quiet         bool
	out           string
}

var benchCfg benchConfig

func benchFlags(fs *flag.FlagSet) {
	benchCfg = benchConfig{}
	c, d := &benchCfg, bench.DefaultConfig
	fs.StringVar(&c.targets, "targets", "", "comma list of target `names` (see --list), or stores as @store; default all")
	fs.StringVar(&c.skip, "skip", "", "comma list of `measurements` to leave out: uncontended, contended, scaling, manykeys, crash, allocs, election, multikey, primitives")
	fs.DurationVar(&c.cfg.Duration, "duration", d.Duration, "length of each contended and many-keys measurement")
	fs.IntVar(&c.cfg.Clients, "clients", d.Clients, "clients contending for one key")
	fs.IntVar(&c.cfg.ManyClients, "many-clients", d.ManyClients, "clients of the many-keys measurement")
	fs.IntVar(&c.cfg.Keys, "keys", d.Keys, "keys of the many-keys measurement")
	fs.IntVar(&c.cfg.Rounds, "rounds", d.Rounds, "uncontended rounds (one acquire+release of each target and its raw baseline per round)")
	fs.IntVar(&c.cfg.CrashTrials, "crash-trials", d.CrashTrials, "vanished holders per target")
	fs.DurationVar(&c.cfg.CrashTimeout, "crash-timeout", d.CrashTimeout, "lease TTL (session timeout) of the vanished-holder measurement")
	fs.DurationVar(&c.cfg.TTL, "ttl", d.TTL, "lease TTL (session timeout) of the other measurements")
	fs.IntVar(&c.cfg.Repeat, "repeat", d.Repeat, "repetitions of the uncontended, contended and scaling measurements (the median is reported)")
	fs.Var(&intList{&c.cfg.Waiters}, "waiters", "comma list of waiter `counts` of the scaling measurement (default 8,32,100)")
	fs.Float64Var(&c.cfg.MaxLoad, "max-load", d.MaxLoad, "refuse to measure while the one-minute load average is at or above this (after waiting --quiet-wait)")
	fs.DurationVar(&c.cfg.QuietWait, "quiet-wait", d.QuietWait, "how long to wait for the load average to drop below --max-load")
	fs.BoolVar(&c.cfg.Force, "force", false, "measure even above --max-load (the results say they are not quiet)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	fs.StringVar(&c.out, "out", "", "write the results to `FILE` instead of stdout")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&c.list, "list", false, "list the targets and exit")
}

func benchCommand(fs *flag.FlagSet) int {
	c := benchCfg
	cmd := commands.Lookup("bench")
	if fs.NArg() > 0 {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	if c.list {
		for _, t := range bench.Targets() {
			fmt.Fprintf(os.Stdout, "%-20s %-8s @%s\n", t.Name, t.Kind, t.Store)
		}
		return cmdline.ExitOK
	}
	if c.cfg.Repeat < 1 {
		return cmd.UsageError(os.Stderr, "--repeat must be at least 1")
	}
	if c.cfg.MaxLoad <= 0 {
		return cmd.UsageError(os.Stderr, "--max-load must be positive")
	}
	c.cfg.Targets = benchSplit(c.targets)
	for _, m := range benchSplit(c.skip) {
		c.cfg.Skip = append(c.cfg.Skip, bench.Measurement(m))
	}
	if _, err := bench.Select(c.cfg.Targets); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var got atomic.Value // the signal that interrupted the run
	go func() {
		select {
		case s := <-sigs:
			got.Store(s)
			cancel()
		case <-ctx.Done():
		}
	}()
	defer servers.Shutdown()
	progress := func(s string) {
		if !c.quiet {
			fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s)
		}
	}
	res, err := bench.Run(ctx, c.cfg, progress)
	if res == nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	if errors.Is(err, bench.ErrBusy) {
		fmt.Fprintf(os.Stderr, "dlock-lab bench: %v\n", err)
		return cmdline.ExitTempFail
	}
	res.Command = commandLine(fs)
	var out []byte
	if c.json {
		if out, err = res.JSON(); err != nil {
			fmt.Fprintf(os.Stderr, "dlock-lab bench: %v\n", err)
			return cmdline.ExitSoftware
		}
		out = append(out, '\n')
	} else {
		out = []byte(res.Markdown())
	}
	if code := writeOut("bench", c.out, out); code != cmdline.ExitOK {
		return code
	}
	if s, ok := got.Load().(syscall.Signal); ok {
		fmt.Fprintf(os.Stderr, "dlock-lab bench: interrupted (%v); the results are incomplete\n", s)
		return cmdline.ExitSignalBase + int(s)
	}
	return benchExit(res, err)
}

// benchExit is the exit code for a run that ended with res and err.
func benchExit(res *bench.Results, err error) int {
	code := cmdline.ExitOK
	for _, r := range res.Rows {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(os.Stderr, "dlock-lab bench: %s: %s\n", r.Name, r.Skipped)
			code = cmdline.ExitUnavailable
		case len(r.Errors) > 0 && code == cmdline.ExitOK:
			fmt.Fprintf(os.Stderr, "dlock-lab bench: %s: %s\n", r.Name, strings.Join(r.Errors, "; "))
			code = cmdline.ExitSoftware
		}
	}
	if err != nil && code == cmdline.ExitOK {
		fmt.Fprintf(os.Stderr, "dlock-lab bench: %v\n", err)
		code = cmdline.ExitSoftware
	}
	return code
}

// commandLine is the dlock-lab bench command with the flags that were set.
func commandLine(fs *flag.FlagSet) string {
	parts := []string{"dlock-lab bench"}
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "out" && f.Name != "quiet" {
			parts = append(parts, fmt.Sprintf("--%s=%s", f.Name, f.Value))
		}
	})
	return strings.Join(parts, " ")
}

func benchSplit(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// intList is a flag of comma-separated positive integers, in increasing order.
type intList struct{ v *[]int }

func (l *intList) String() string {
	if l == nil || l.v == nil {
		return ""
	}
	var parts []string
	for _, n := range *l.v {
		parts = append(parts, strconv.Itoa(n))
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	var out []int
	for _, p := range benchSplit(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", p)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return fmt.Errorf("counts must increase: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return errors.New("no count given")
	}
	*l.v = out
	return nil
}

// writeOut writes a command's results to path (--out), or to stdout when path is "",
// and returns ExitOK or, when the file cannot be written, ExitOSErr (said on stderr).
func writeOut(command, path string, out []byte) int {
	if path == "" {
		os.Stdout.Write(out)
		return cmdline.ExitOK
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "dlock-lab %s: %v\n", command, err)
		return cmdline.ExitOSErr
	}
	return cmdline.ExitOK
}
