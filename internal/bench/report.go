package bench

import (
	"fmt"
	"strings"
	"time"
)

// Check is one of the targets of issue 10: a ratio measured in this run against a
// limit.
type Check struct {
	Claim  string  // what is claimed, e.g. "redis ≤ 1.05× bsm/redislock (uncontended p50)"
	Value  float64 // the measured ratio (0 when Missing)
	Limit  float64
	AtMost bool // Value must be ≤ Limit (else ≥)
	Met    bool
	// Missing says which side of the ratio was not measured (skipped, failed or not
	// selected); Met is false then.
	Missing string `json:",omitempty"`
}

// checks evaluates the targets against the rows of res.
func checks(res *Results) []Check {
	p50 := func(r *Row) float64 {
		if r == nil || r.Uncontended == nil {
			return 0
		}
		return float64(r.Uncontended.P50)
	}
	rate := func(r *Row) float64 {
		if r == nil || r.Contended == nil {
			return 0
		}
		return r.Contended.TransferRate
	}
	ratio := func(claim string, a, b string, get func(*Row) float64, atMost bool, limit float64) Check {
		c := Check{Claim: claim, Limit: limit, AtMost: atMost}
		if res.Row(a) == nil && res.Row(b) == nil {
			return c // neither side selected: not reported
		}
		va, vb := get(res.Row(a)), get(res.Row(b))
		switch {
		case va == 0:
			c.Missing = a
		case vb == 0:
			c.Missing = b
		default:
			c.Value = va / vb
			c.Met = atMost && c.Value <= limit || !atMost && c.Value >= limit
		}
		return c
	}
	var out []Check
	for _, c := range []Check{
		ratio("redis ≤ 1.05× bsm/redislock (uncontended p50)", "redis", "bsm/redislock", p50, true, 1.05),
		ratio("redlock(5) ≤ 0.7× redsync(5) (uncontended p50)", "redlock(5)", "redsync(5)", p50, true, 0.7),
		ratio("etcd ≤ 1.05× etcd-mutex (uncontended p50)", "etcd", "etcd-mutex", p50, true, 1.05),
		ratio("etcd ≥ 3× etcd-mutex (contended hand-offs/s, to another client)", "etcd", "etcd-mutex", rate, false, 3),
		ratio("zk ≤ 1.0× zk.Lock (uncontended p50)", "zk", "zk.Lock", p50, true, 1.0),
		ratio("mysql ≤ 1.15× raw INSERT+DELETE (uncontended p50)", "mysql", rawMySQL, p50, true, 1.15),
	} {
		if c.Met || c.Missing != "" || c.Value != 0 {
			out = append(out, c)
		}
	}
	for _, r := range res.Rows {
		if r.Kind != Backend || r.Contended == nil {
			continue
		}
		v := r.Contended.MaxOverMean()
		out = append(out, Check{Claim: r.Name + ": longest wait ≤ 10× mean wait (contended)", Value: v, Limit: 10, AtMost: true, Met: v > 0 && v <= 10})
	}
	return out
}

// Markdown renders the results as one table of every target (raw baselines first in
// their store), the checks, and the setup.
func (r *Results) Markdown() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "# dlock bench, %s\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s %s/%s; load average %s at the start, %s at the end. Run took %v.\n\n",
		r.Machine.CPUs, orDash(r.Machine.CPU), r.Machine.GoVersion, r.Machine.OS, r.Machine.Arch,
		orDash(r.Machine.LoadBefore), orDash(r.Machine.LoadAfter), r.Elapsed.Round(time.Second))
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	b.WriteString("Absolute times are noisy on a shared machine; compare ratios within this run only.\n\n")
	fmt.Fprintf(&b, "| target | kind | uncontended p50 | p99 | ×raw | %d clients: grants/s | hand-offs/s | longest wait | max/mean wait | Jain | many keys (%d×%d) cycles/s | after a crash p50 / max (freed by) | allocs/cycle | B/cycle |\n",
		c.Clients, c.ManyClients, c.Keys)
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|\n")
	for _, row := range r.Rows {
		cells := []string{mdEscape(row.Name), string(row.Kind)}
		if row.Skipped != "" {
			cells = append(cells, "skipped: "+mdEscape(row.Skipped))
			for range 11 {
				cells = append(cells, "")
			}
			fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
			continue
		}
		if u := row.Uncontended; u != nil {
			cells = append(cells, dur(u.P50), dur(u.P99), ratioCell(row.RawRatio))
		} else {
			cells = append(cells, "–", "–", "–")
		}
		if k := row.Contended; k != nil {
			cells = append(cells, fmt.Sprintf("%.0f", k.Rate)+unavail(k.Unavailable)+lostNote(k.Lost), fmt.Sprintf("%.0f", k.TransferRate), dur(k.Wait.Max), fmt.Sprintf("%.1f", k.MaxOverMean()), fmt.Sprintf("%.3f", k.Jain))
		} else {
			cells = append(cells, "–", "–", "–", "–", "–")
		}
		if m := row.ManyKeys; m != nil {
			cells = append(cells, fmt.Sprintf("%.0f", m.Rate)+unavail(m.Unavailable))
		} else {
			cells = append(cells, "–")
		}
		if x := row.Crash; x != nil {
			cells = append(cells, fmt.Sprintf("%s / %s (%s)", dur(x.P50), dur(x.Max), x.Timeout))
		} else {
			cells = append(cells, "–")
		}
		if a := row.Allocs; a != nil {
			cells = append(cells, fmt.Sprintf("%.0f", a.PerCycle), fmt.Sprintf("%.0f", a.BytesPerCycle))
		} else {
			cells = append(cells, "–", "–")
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString(r.primitivesMarkdown())
	var errs []string
	for _, row := range r.Rows {
		for _, e := range row.Errors {
			errs = append(errs, fmt.Sprintf("- %s: %s", row.Name, mdEscape(e)))
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(&b, "\nFailures:\n\n%s\n", strings.Join(errs, "\n"))
	}
	b.WriteString("\n| target (ratios from this run) | measured | limit | met |\n|---|--:|--:|---|\n")
	for _, ch := range r.Checks {
		op := "≤"
		if !ch.AtMost {
			op = "≥"
		}
		v, met := fmt.Sprintf("%.2f", ch.Value), "no"
		if ch.Met {
			met = "yes"
		}
		if ch.Missing != "" {
			v, met = "–", "not measured ("+mdEscape(ch.Missing)+")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s %.2f | %s |\n", mdEscape(ch.Claim), v, op, ch.Limit, met)
	}
	fmt.Fprintf(&b, "\nSetup: uncontended = %d rounds (after %d warm-up rounds), each an Acquire+Release of every target and its raw baseline in turn, each on a client and key of its own, TTL %v. "+
		"Contended = %d clients (one connection or session each) acquiring one key for %v, releasing at once and asking again; grants/s counts every grant, hand-offs/s only those to another client than the previous holder (a client that takes the lock straight back adds a grant, not a hand-off); wait = from calling Acquire to holding; Jain's index over the clients' grant counts. "+
		"Many keys = %d clients cycling through %d keys for %v. "+
		"Crash = a holder connected through TCP proxies takes the lock, another client starts waiting, %v later every proxy closes the holder's connections and refuses new ones (the holder never releases); the time from the cut to the waiter's grant, %d trials. "+
		"Allocations = heap allocations of the whole process per Acquire+Release over %d cycles (the etcd server runs in this process: its allocations are in the etcd rows, raw included).\n",
		c.Rounds, c.Warmup, c.TTL, c.Clients, c.Duration, c.ManyClients, c.Keys, c.Duration, crashHold, c.CrashTrials, c.AllocCycles)
	return b.String()
}

// unavail notes Acquire calls that failed with dlock.ErrUnavailable.
func unavail(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d unavailable)", n)
}

// lostNote notes releases that found their lock gone (a lease lost while held).
func lostNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d leases lost)", n)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func ratioCell(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// dur prints a duration with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
