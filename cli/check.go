package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

func init() {
	register(&command{
		Name:     "check",
		Summary:  "run the conformance suite against your own servers and print the outcome",
		Synopsis: "dlock check --url URL [--doctor] [--run REGEXP] [--timeout D] [-v]",
		Help:     checkHelp,
		Footer:   checkFooter,
		Flags:    checkFlags,
		Run:      checkCommand,
	})
}

const checkHelp = `
Run dlock's conformance suite against the lock service at URL — your own Redis,
MySQL, ZooKeeper or etcd — and print, property by property, whether it behaves as its
backend declares: mutual exclusion, deadlock freedom (a holder that stops renewing
loses the lock after its TTL, not before), owner-only release, expiry, refresh,
try-acquire, cancellation, fencing tokens, key isolation, input validation, close,
concurrent use, Done/Err, no goroutine leaks. Takes about 10 to 30 seconds.

The suite opens several clients of URL and works on keys under "conformance/",
each with a random suffix; it deletes nothing else and leaves no lock behind. Use a
database or prefix you can spare all the same.

A backend that declares a weakness (e.g. redis+setnx, the peers) must show it: the
suite checks that the weakness reproduces. A few weaknesses need a fault that only the
backend's own test harness can inject (a crash between two commands, a skewed client
clock, a key deleted behind the holder's back, a cut connection); "dlock check" does not
declare those, so there the property is checked as a guarantee and is printed with a note.
The fault campaign (crashes, partitions, failovers) is not run here: see
"dlock-lab compare".

First, the deployment check: dlock reads the servers' own configuration (Redis:
persistence, maxmemory-policy, replicas and wait_replicas; ZooKeeper: the session
timeout granted against the one asked, the ensemble's size, the nodes' ACL; MySQL:
commit durability, binary log, replication role, wait_timeout; etcd: cluster size and
health) and prints which fault scenarios of the report this deployment is exposed
to, each line named by the scenario (or property) that shows the risk. --doctor
prints only that, in a second or so, and exits 1 if anything is exposed.

Examples:
  dlock check --url redis://127.0.0.1:6379
  dlock check --url redis://127.0.0.1:6379 --doctor
  DLOCK_URL='mysql://app:secret@db1:3306/locks' dlock check
  dlock check --url-file /etc/dlock/url --doctor
  dlock check --url zk://zk1:2181,zk2:2181,zk3:2181/dlock-check --run 'Mutual|Deadlock'
  dlock check --url etcd://10.0.0.1:2379/dlock-check -v
`

const checkFooter = `
Exit codes:
  0   every property is what the backend declares (--doctor: nothing exposed)
  1   at least one property is not (the failing checks' log is printed);
      --doctor: at least one finding is an exposure
  64  usage error: bad flags, a malformed URL, a scheme dlock has no declaration
      (--doctor: no deployment check) for
  69  the lock service cannot be reached
  70  the suite could not be run`

type checkConfig struct {
	src      urlSource
	doctor   bool
	url, run string
	timeout  time.Duration
	verbose  bool
}

var checkCfg checkConfig

func checkFlags(fs *flag.FlagSet) {
	checkCfg = checkConfig{}
	c := &checkCfg
	c.src.register(fs)
	fs.BoolVar(&c.doctor, "doctor", false, "only the deployment check: read the servers' configuration, say what it exposes the locks to")
	fs.StringVar(&c.run, "run", "", "check only the properties matching `REGEXP` (e.g. 'Mutual|Fencing')")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.BoolVar(&c.verbose, "v", false, "print the suite's whole log")
}

// Environment of the child process that runs the suite.
const (
	checkChildEnv = "DLOCK_CHECK_CHILD_URL"
	checkRunEnv   = "DLOCK_CHECK_CHILD_RUN"
)

// checkCommand is "dlock check".
func checkCommand(fs *flag.FlagSet) int {
	cmd := commands.Lookup("check")
	c := checkCfg
	var err error
	if c.url, err = c.src.resolve(); err != nil {
		return cmd.UsageError(os.Stderr, err.Error())
	}
	switch {
	case fs.NArg() > 0:
		return cmd.UsageError(os.Stderr, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case c.timeout <= 0:
		return cmd.UsageError(os.Stderr, "--timeout must be positive")
	}
	if c.run != "" {
		if _, err := regexp.Compile(c.run); err != nil {
			return cmd.UsageError(os.Stderr, "--run: "+err.Error())
		}
	}
	u, err := dlock.ParseURL(c.url)
	if err != nil {
		return cmd.UsageError(os.Stderr, "--url: "+err.Error())
	}
	if !slices.Contains(dlock.Schemes(), u.Scheme) {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("--url: unknown scheme %q (known: %s)", u.Scheme, strings.Join(dlock.Schemes(), ", ")))
	}
	// Open once here, so that a bad URL or an unreachable server is said plainly.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l, err := dlock.Open(ctx, c.url)
	cancel()
	if err != nil {
		if errors.Is(err, dlock.ErrInvalidURL) {
			return cmd.UsageError(os.Stderr, "--url: "+err.Error())
		}
		fmt.Fprintf(os.Stderr, "dlock check: cannot reach %s: %v\n", u.Redacted(), err)
		return exitUnavailable
	}
	_ = l.Close()
	if exposed, code := inspect(os.Stdout, c, u); c.doctor {
		return doctorExit(exposed, code)
	}
	if _, err := dlock.Declared(u); err != nil {
		return cmd.UsageError(os.Stderr, fmt.Sprintf("--url %s: no declared capabilities: %v", u.Redacted(), err))
	}

	return runCheckChild(c, u)
}

// runCheckChild runs the suite in a child process of dlock (conformance.Run needs a
// *testing.T) and prints its outcome.
func runCheckChild(c checkConfig, u *url.URL) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %v\n", err)
		return exitSoftware
	}
	dir, err := os.MkdirTemp("", "dlock-check-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %v\n", err)
		return exitSoftware
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	child := exec.CommandContext(ctx, self)
	child.Env = append(os.Environ(), checkChildEnv+"="+c.url, checkRunEnv+"="+c.run, results.DirEnv+"="+dir)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %v\n", err)
		return exitSoftware
	}
	fmt.Fprintf(os.Stderr, "dlock check: running the conformance suite against %s\n", u.Redacted())
	if err := child.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %v\n", err)
		return exitSoftware
	}
	failed := followSuite(out, os.Stdout, c.verbose)
	waitErr := child.Wait()
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "dlock check: gave up after --timeout %v\n", c.timeout)
		return 1
	}

	r, rerr := report.FromDir(dir)
	if rerr != nil {
		fmt.Fprintf(os.Stderr, "dlock check: the suite left no results (%v); exit status %v\n", rerr, waitErr)
		return exitSoftware
	}
	r.Failures = failed
	caps, _ := dlock.Declared(u)
	if len(caps.HarnessOnly) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("declared weaknesses not checked here (they need a fault only the backend's own test harness injects): %v", caps.HarnessOnly))
	}
	if caps.FIFO {
		r.Notes = append(r.Notes, "FIFO (waiters served in arrival order) is declared but not checked here: it needs a view of the store's queue that only the backend's own test harness has")
	}
	r.WriteSummary(os.Stdout)
	for _, n := range r.Notes {
		fmt.Fprintf(os.Stdout, "note: %s\n", n)
	}
	if waitErr != nil || len(failed) > 0 || len(r.Surprises()) > 0 {
		fmt.Fprintf(os.Stdout, "\n%s does NOT behave as the %s backend declares.\n", u.Redacted(), u.Scheme)
		return 1
	}
	fmt.Fprintf(os.Stdout, "\n%s behaves as the %s backend declares.\n", u.Redacted(), u.Scheme)
	return exitOK
}

var (
	runLine  = regexp.MustCompile(`^=== (RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	doneLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([^)]*)\)`)
)

// followSuite reads the child's -test.v output: it prints one line per finished
// property (and everything with verbose), prints the log of every failed property,
// and returns the names of the failed ones.
func followSuite(r io.Reader, w io.Writer, verbose bool) (failed []string) {
	logs := map[string][]string{}
	current := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if verbose {
			fmt.Fprintln(w, line)
		}
		if m := runLine.FindStringSubmatch(line); m != nil {
			current = m[2]
			continue
		}
		if m := doneLine.FindStringSubmatch(line); m != nil {
			name := strings.TrimPrefix(m[2], "TestCheck/")
			if name == "TestCheck" {
				continue
			}
			if !verbose {
				fmt.Fprintf(w, "%-4s %s (%s)\n", m[1], name, m[3])
			}
			if m[1] == "FAIL" {
				failed = append(failed, name)
				if !verbose {
					for _, l := range logs[m[2]] {
						fmt.Fprintf(w, "     %s\n", strings.TrimSpace(l))
					}
				}
			}
			continue
		}
		if current != "" {
			logs[current] = append(logs[current], line)
		}
	}
	return failed
}

// urlHarness gives the suite clients opened from one URL.
type urlHarness struct {
	url  string
	caps spec.Capabilities
	name string
}

func (h urlHarness) NewLocker(t testing.TB) dlock.Locker {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := dlock.Open(ctx, h.url)
	if err != nil {
		t.Fatalf("dlock.Open: %v", err)
	}
	return l
}

func (h urlHarness) Capabilities() spec.Capabilities { return h.caps }

func (h urlHarness) Name() string { return h.name }

// checkChild is the child process of "dlock check": it runs conformance.Run on the
// URL in its environment as the test TestCheck, with -test.v output on stdout and the
// cells saved to $DLOCK_REPORT_DIR, and returns testing's exit code.
func checkChild() int {
	raw := os.Getenv(checkChildEnv)
	u, err := url.Parse(raw)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %v\n", err)
		return exitUsage
	}
	caps, err := dlock.Declared(u)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlock check: %s: %v\n", u.Redacted(), err)
		return exitUsage
	}
	caps.Weaknesses = slices.DeleteFunc(slices.Clone(caps.Weaknesses), func(p spec.Property) bool { return slices.Contains(caps.HarnessOnly, p) })
	h := urlHarness{url: raw, caps: caps, name: u.Scheme}
	run := "^TestCheck$"
	if p := os.Getenv(checkRunEnv); p != "" {
		run += "/(" + p + ")" // parenthesized: testing splits a pattern at a top-level |
	}
	os.Args = []string{os.Args[0], "-test.v", "-test.run", run, "-test.count=1"}
	testing.Main(regexp.MatchString, []testing.InternalTest{{Name: "TestCheck", F: func(t *testing.T) { conformance.Run(t, h) }}}, nil, nil)
	return exitSoftware // testing.Main exits
}
