package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/bench"
	"github.com/dlock-go/dlock/internal/servers"
)

func init() {
	register(&command{
		Name:     "soak",
		Summary:  "run every backend under sustained load and show that nothing leaks or overlaps",
		Synopsis: "dlock soak [--targets T,...] [--duration D] [--clients N] [--keys N] [--json] [--out FILE]",
		Help:     soakHelp,
		Footer:   soakFooter,
		Flags:    soakFlags,
		Run:      soakCommand,
	})
}

const soakHelp = `
Start the same servers as "dlock bench" and run each backend (or the --targets given)
in turn for --duration: --clients clients, each in a loop that takes a random one of
--keys keys, enters that key's fenced resource with its token for 1ms, and releases.
Every second it samples this process's goroutines, open sockets and live heap.

Printed per backend: grants, overlaps (two holders of one key at once) and stale
tokens (a token not above one the key's resource had seen; 0 for backends without
fencing), errors, and the goroutines, sockets and heap of an early and the last
window (a tenth of the run, at most 10s; the early one is the second, after the
clients' connection pools have warmed up): "flat" when the last is within 10% of the
early one. Overlaps and stale tokens must be 0, and every row flat.

Examples:
  dlock soak > soak.md
  dlock soak --targets redis,etcd --duration 20s
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
	fs.StringVar(&c.targets, "targets", "", "comma list of target `names` (see dlock bench --list); default every backend")
	fs.DurationVar(&c.cfg.Duration, "duration", d.Duration, "how long each backend runs")
	fs.IntVar(&c.cfg.Clients, "clients", d.Clients, "clients per backend")
	fs.IntVar(&c.cfg.Keys, "keys", d.Keys, "keys the clients pick from at random")
	fs.DurationVar(&c.cfg.TTL, "ttl", d.TTL, "lease TTL")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of Markdown")
	fs.StringVar(&c.out, "out", "", "write the results to `FILE` instead of stdout")
}

func soakCommand(fs *flag.FlagSet) int {
	c := soakCfg
	cmd := commands["soak"]
	if fs.NArg() > 0 {
		return cmd.usageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	c.cfg.Targets = benchSplit(c.targets)
	c.cfg.Window = min(10*time.Second, c.cfg.Duration/10)
	if _, err := bench.Select(c.cfg.Targets); err != nil {
		return cmd.usageError(os.Stderr, err.Error())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer servers.Shutdown()
	res, err := bench.Soak(ctx, c.cfg, func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), s) })
	if err != nil {
		return cmd.usageError(os.Stderr, err.Error())
	}
	out := []byte(res.Markdown())
	if c.json {
		if out, err = json.MarshalIndent(res, "", "  "); err != nil {
			fmt.Fprintf(os.Stderr, "dlock soak: %v\n", err)
			return exitSoftware
		}
		out = append(out, '\n')
	}
	if c.out != "" {
		if err := os.WriteFile(c.out, out, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "dlock soak: %v\n", err)
			return exitOSErr
		}
	} else {
		os.Stdout.Write(out)
	}
	code := exitOK
	for _, r := range res.Rows {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(os.Stderr, "dlock soak: %s: %s\n", r.Name, r.Skipped)
			code = max(code, exitUnavailable)
		case r.Violations > 0 || r.Stale > 0 || !r.Flat:
			fmt.Fprintf(os.Stderr, "dlock soak: %s: %d overlaps, %d stale tokens, flat %v\n", r.Name, r.Violations, r.Stale, r.Flat)
			if code == exitOK {
				code = 1
			}
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "dlock soak: interrupted; the results are incomplete")
	}
	return code
}
