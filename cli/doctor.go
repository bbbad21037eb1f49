package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// inspectTimeout bounds the deployment check.
const inspectTimeout = 30 * time.Second

// inspect runs the deployment check of "dlock check" (dlock.Inspect) on c's URL and
// prints the findings to w. It returns how many findings are exposures, and exitOK
// or the exit code of a failure: exitUsage for a scheme without a deployment check
// (said only with --doctor; "dlock check" then just runs the suite), exitUnavailable
// when the servers cannot be read.
func inspect(w io.Writer, c checkConfig, u *url.URL) (exposed, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), inspectTimeout)
	defer cancel()
	fs, err := dlock.Inspect(ctx, c.url)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		if c.doctor {
			fmt.Fprintf(os.Stderr, "dlock check: the %s backend has no deployment check\n", u.Scheme)
			return 0, exitUsage
		}
		return 0, exitOK
	case err != nil:
		fmt.Fprintf(os.Stderr, "dlock check: deployment check of %s: %v\n", u.Redacted(), err)
		return 0, exitUnavailable
	}
	return printFindings(w, u, fs), exitOK
}

// printFindings prints fs, exposures first, and returns how many are exposures.
func printFindings(w io.Writer, u *url.URL, fs []spec.Finding) int {
	fmt.Fprintf(w, "Deployment check of %s (the servers' own configuration; each line names the fault scenario or property of the report that shows the risk):\n", u.Redacted())
	var topics []string
	for _, exposedFirst := range []bool{true, false} {
		for _, f := range fs {
			if f.Exposed != exposedFirst {
				continue
			}
			mark := "ok     "
			if f.Exposed {
				mark = "EXPOSED"
				topics = append(topics, f.Topic())
			}
			fmt.Fprintf(w, "  %s  %-17s %s\n  %7s  %-17s %s\n", mark, f.Topic(), f.Setting, "", "", f.Detail)
		}
	}
	if len(topics) == 0 {
		fmt.Fprintf(w, "Exposed to: nothing the check knows of.\n\n")
		return 0
	}
	fmt.Fprintf(w, "Exposed to: %s (docs/tradeoffs.md: what each does to each backend).\n\n", strings.Join(dedupe(topics), ", "))
	return len(topics)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// doctorExit is the exit code of "dlock check --doctor": code if the check failed,
// else 1 when a finding is an exposure and 0 when none is.
func doctorExit(exposed, code int) int {
	switch {
	case code != exitOK:
		return code
	case exposed > 0:
		return 1
	}
	return exitOK
}
