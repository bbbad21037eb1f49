package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/dlock-go/dlock"
)

func init() {
	register(&command{
		Name:     "inspect",
		Summary:  "show who holds and who waits for keys: owner, token, since, time left",
		Synopsis: "dlock inspect [--url URL | --url-file FILE] [--json] KEY...",
		Help:     inspectHelp,
		Footer:   inspectFooter,
		Flags:    inspectFlags("inspect"),
		Run:      func(fs *flag.FlagSet) int { return inspectCommand("inspect", fs) },
	})
	register(&command{
		Name:     "ls",
		Summary:  "list the keys held or waited for (under a prefix) and their holders",
		Synopsis: "dlock ls [--url URL | --url-file FILE] [--json] [PREFIX]",
		Help:     lsHelp,
		Footer:   lsFooter,
		Flags:    inspectFlags("ls"),
		Run:      func(fs *flag.FlagSet) int { return inspectCommand("ls", fs) },
	})
}

const inspectHelp = `
Show what the store at URL holds on each KEY: for the key's lock, semaphore,
read-write lock and the election of that name, every holder — the store's owner
id, the fencing token, since when, the time left, the host, process id and name its
client recorded (dlock run and dlock elect record theirs) — and the waiters where
the store queues them (the fair modes, ZooKeeper, etcd). It reads only: it takes no
lock and changes nothing. What each backend's store keeps is in docs/inspect.md.

With --json, print one JSON array of states (key, kind, limit, queue, note,
holders, waiters; since as RFC 3339, ttl_seconds) instead.

Examples:
  dlock inspect --url redis://127.0.0.1:6379 jobs/nightly
  dlock inspect --url etcd://127.0.0.1:2379 --json jobs/nightly jobs/hourly
`

const inspectFooter = `
Exit codes:
  0      something holds or waits on at least one KEY
  3      nothing holds or waits on any KEY
  64     usage error (no KEY, a bad key or URL)
  69     the backend cannot be opened or reached, or cannot be read this way`

const lsHelp = `
List every key whose name begins with PREFIX (every key without one) that the store
at URL holds or queues for, with its holders and waiters as "dlock inspect" shows
them, sorted by key. Some stores cannot enumerate their locks (MySQL's GET_LOCK
before MariaDB shows them, Redlock masters that disagree): ls then says why and
exits 69.

Examples:
  dlock ls --url redis://127.0.0.1:6379
  dlock ls --url zk://127.0.0.1:2181 --json jobs/
`

const lsFooter = `
Exit codes:
  0      the list was printed (perhaps empty)
  64     usage error
  69     the backend cannot be opened or reached, or cannot list its locks`

// exitNothingHeld: "dlock inspect" found nothing on any key.
const exitNothingHeld = 3

// describeTimeout bounds the reads of inspect and ls.
const describeTimeout = 30 * time.Second

type inspectConfig struct {
	src  urlSource
	json bool
}

var inspectCfg inspectConfig

func inspectFlags(string) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		inspectCfg = inspectConfig{}
		inspectCfg.src.register(fs)
		fs.BoolVar(&inspectCfg.json, "json", false, "print JSON")
	}
}

func inspectCommand(name string, fs *flag.FlagSet) int {
	cmd := commands.Lookup(name)
	c := inspectCfg
	u, err := c.src.resolve()
	if err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	args := fs.Args()
	switch {
	case name == "inspect" && len(args) == 0:
		return cmd.UsageError(os.Stderr, "at least one KEY is required")
	case name == "ls" && len(args) > 1:
		return cmd.UsageError(os.Stderr, "at most one PREFIX")
	}
	if name == "inspect" {
		for _, k := range args {
			if err := dlock.ValidateKey(k); err != nil {
				return cmd.UsageError(os.Stderr, err.Error())
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	l, err := dlock.Open(ctx, u)
	if err != nil {
		if errors.Is(err, dlock.ErrInvalidURL) {
			return cmd.UsageError(os.Stderr, "--url: "+err.Error())
		}
		fmt.Fprintf(os.Stderr, "dlock %s: cannot open %s: %v\n", name, redact(u), err)
		return exitUnavailable
	}
	defer l.Close()
	var states []dlock.KeyState
	if name == "ls" {
		prefix := ""
		if len(args) == 1 {
			prefix = args[0]
		}
		states, err = dlock.List(ctx, l, prefix)
	} else {
		for _, k := range args {
			var s []dlock.KeyState
			if s, err = dlock.Describe(ctx, l, k); err != nil {
				break
			}
			states = append(states, s...)
		}
	}
	switch {
	case errors.Is(err, dlock.ErrInvalidKey):
		return cmd.UsageError(os.Stderr, err.Error())
	case err != nil:
		fmt.Fprintf(os.Stderr, "dlock %s: %v\n", name, err)
		return exitUnavailable
	}
	now := time.Now()
	if c.json {
		err = writeStatesJSON(os.Stdout, states)
	} else {
		err = writeStates(os.Stdout, states, now)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock %s: %v\n", name, err)
		return exitOSErr
	}
	if name == "inspect" && len(states) == 0 {
		fmt.Fprintf(os.Stderr, "dlock inspect: nothing holds or waits on %s\n", strings.Join(quoteAll(args), ", "))
		return exitNothingHeld
	}
	return exitOK
}

// writeStates prints states for a reader: a line per key and kind, then one per
// holder and waiter. Every string a store or a client wrote is quoted when it is
// not plain printable text, so that it cannot forge lines or terminal escapes.
func writeStates(w io.Writer, states []dlock.KeyState, now time.Time) error {
	var b strings.Builder
	for _, s := range states {
		fmt.Fprintf(&b, "%s\t%s", printable(s.Key), s.Kind)
		if s.Limit > 0 {
			fmt.Fprintf(&b, "\tlimit %d", s.Limit)
		}
		if s.Queue {
			fmt.Fprintf(&b, "\t%d waiting", len(s.Waiters))
		} else {
			b.WriteString("\twaiters not kept by the store")
		}
		if s.Note != "" {
			fmt.Fprintf(&b, "\t(%s)", printable(s.Note))
		}
		b.WriteByte('\n')
		for _, e := range s.Holders {
			writeEntry(&b, "holder", e, now)
		}
		for _, e := range s.Waiters {
			writeEntry(&b, "waiter", e, now)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeEntry(b *strings.Builder, role string, e dlock.Entry, now time.Time) {
	fmt.Fprintf(b, "  %s", role)
	if e.Shared {
		b.WriteString(" (shared)")
	}
	if e.Token != 0 {
		fmt.Fprintf(b, "\ttoken %d", e.Token)
	}
	if e.Owner != "" {
		fmt.Fprintf(b, "\towner %s", printable(e.Owner))
	}
	if e.Value != "" {
		fmt.Fprintf(b, "\tvalue %s", printable(e.Value))
	}
	if !e.Since.IsZero() {
		fmt.Fprintf(b, "\tsince %s (%s ago)", e.Since.UTC().Format(time.RFC3339), now.Sub(e.Since).Round(time.Millisecond))
	}
	if e.TTL > 0 {
		fmt.Fprintf(b, "\tttl %s", e.TTL.Round(time.Millisecond))
	}
	if e.Address != "" {
		fmt.Fprintf(b, "\taddress %s", printable(e.Address))
	}
	if h := e.Holder; h != nil {
		if h.Host != "" {
			fmt.Fprintf(b, "\thost %s", printable(h.Host))
		}
		if h.PID != 0 {
			fmt.Fprintf(b, "\tpid %d", h.PID)
		}
		if h.Name != "" {
			fmt.Fprintf(b, "\tname %s", printable(h.Name))
		}
	}
	b.WriteByte('\n')
}

// printable returns s as it is when it is plain printable text without tabs,
// and quoted as a Go string literal otherwise.
func printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// jsonState and jsonEntry are the --json form of a KeyState and an Entry.
type jsonState struct {
	Key     string      `json:"key"`
	Kind    dlock.Kind  `json:"kind"`
	Limit   int         `json:"limit,omitempty"`
	Queue   bool        `json:"queue"`
	Note    string      `json:"note,omitempty"`
	Holders []jsonEntry `json:"holders"`
	Waiters []jsonEntry `json:"waiters"`
}

type jsonEntry struct {
	Owner      string        `json:"owner,omitempty"`
	Token      uint64        `json:"token,omitempty"`
	Shared     bool          `json:"shared,omitempty"`
	Value      string        `json:"value,omitempty"`
	Since      *time.Time    `json:"since,omitempty"`
	TTLSeconds float64       `json:"ttl_seconds,omitempty"`
	Address    string        `json:"address,omitempty"`
	Holder     *dlock.Holder `json:"holder,omitempty"`
}

func writeStatesJSON(w io.Writer, states []dlock.KeyState) error {
	out := make([]jsonState, 0, len(states))
	for _, s := range states {
		js := jsonState{Key: s.Key, Kind: s.Kind, Limit: s.Limit, Queue: s.Queue, Note: s.Note,
			Holders: jsonEntries(s.Holders), Waiters: jsonEntries(s.Waiters)}
		out = append(out, js)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func jsonEntries(es []dlock.Entry) []jsonEntry {
	out := make([]jsonEntry, 0, len(es))
	for _, e := range es {
		je := jsonEntry{Owner: e.Owner, Token: e.Token, Shared: e.Shared, Value: e.Value,
			TTLSeconds: e.TTL.Seconds(), Address: e.Address, Holder: e.Holder}
		if !e.Since.IsZero() {
			since := e.Since.UTC()
			je.Since = &since
		}
		out = append(out, je)
	}
	return out
}
