package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/cmdline"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/lab/bench"
)

func init() {
	register(&command{
		Name:     "soak",
		Summary:  "run every backend under sustained load and show that nothing leaks or overlaps",
		Synopsis: "dlock-lab soak [--targets T,...] [--duration D] [--clients N] [--keys N] [--elections] [--json] [--out FILE]",
		Help:     soakHelp,
		Footer:   soakFooter,
		Flags:    soakFlags,
		Run:      soakCommand,
	})
}

const soakHelp = `
Start the same servers as "dlock-lab bench" and run each backend (or the --targets given)
in turn for --duration: --clients clients, each in a loop that takes a random one of
--keys keys, enters that key's fenced resource with its token for 1ms, and releases.
Every second it samples this process's goroutines, open sockets and live heap.
With --elections the clients campaign instead in elections named like the keys (each
term leads 1ms and resigns; a tenth of the turns also observe a name, maybe one
nobody campaigns in, for 10ms), on the backends that have elections.

Printed per backend: grants, overlaps (two holders of one key at once) and stale
tokens (a token not above one the key's resource had seen; 0 for backends without
fencing), errors, and the goroutines, sockets and heap of an early and the last
window (a tenth of the run, at most 10s; the early one is the second, after the
clients' connection pools have warmed up): "flat" when the last is within 10% of the
early one. For Redis and the in-process store it also counts the keys the store keeps
before the run and after it, once a TTL has passed: flat when no more than one counter
per name (--keys) stayed. Overlaps and stale tokens must be 0, and every row flat.

Examples:
  dlock-lab soak > soak.md
  dlock-lab soak --targets redis,etcd --duration 20s
  dlock-lab soak --elections --targets mem,redis
`

const soakFooter = `
Exit codes:
  0    every backend ran with no overlap, no stale token, and flat resources
  1    an overlap, a stale token, or growth between the first and the last window
  64   usage error
  69   a server could not be started (its row is marked skipped)`

type soakConfig struct {
	targets string
	cfg     bench.SoakConfig
	json    bool
	out     string
}

var soakCfg soakConfig

func soakFlags(fs *flag.FlagSet) {
	soakCfg = soakConfig{}
	c, d := &soakCfg, bench.DefaultSoakConfig
	fs.StringVar(&c.targets, "targets", "", "comma list of target `names` (see dlock-lab bench --list); default every backend")
	fs.DurationVar(&c.cfg.Duration, "duration", d.Duration, "how long each backend runs")
	fs.IntVar(&c.cfg.Clients, "clients", d.Clients, "clients per backend")
	fs.IntVar(&c.cfg.Keys, "keys", d.Keys, "keys the clients pick from at random")
	fs.DurationVar(&c.cfg.TTL, "ttl", d.TTL, "lease TTL")
	fs.BoolVar(&c.cfg.Elections, "elections", false, "campaign in elections instead of taking locks")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	fs.StringVar(&c.out, "out", "", "write the results to `FILE` instead of stdout")
}

func soakCommand(fs *flag.FlagSet) int {
	c := soakCfg
	cmd := commands.Lookup("soak")
	if fs.NArg() > 0 {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	c.cfg.Targets = benchSplit(c.targets)
	c.cfg.Window = min(10*time.Second, c.cfg.Duration/10)
	if _, err := bench.Select(c.cfg.Targets); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer servers.Shutdown()
	res, err := bench.Soak(ctx, c.cfg, func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) })
	if err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	out := []byte(res.Markdown())
	if c.json {
		if out, err = json.MarshalIndent(res, "", "  "); err != nil {
			fmt.Fprintf(os.Stderr, "dlock-lab soak: %v\n", err)
			return cmdline.ExitSoftware
		}
		out = append(out, '\n')
	}
	if code := writeOut("soak", c.out, out); code != cmdline.ExitOK {
		return code
	}
	code := cmdline.ExitOK
	for _, r := range res.Rows {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(os.Stderr, "dlock-lab soak: %s: %s\n", r.Name, r.Skipped)
			code = max(code, cmdline.ExitUnavailable)
		case r.Violations > 0 || r.Stale > 0 || !r.Flat:
			fmt.Fprintf(os.Stderr, "dlock-lab soak: %s: %d overlaps, %d stale tokens, flat %v\n", r.Name, r.Violations, r.Stale, r.Flat)
			if code == cmdline.ExitOK {
				code = 1
			}
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "dlock-lab soak: interrupted; the results are incomplete")
	}
	return code
}
