package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Check is one of the targets of issue 19: a ratio measured in this run against a
// limit.
type Check struct {
	Claim  string  // what is claimed, e.g. "redis ≤ 1.05× bsm/redislock (uncontended p50)"
	Value  float64 // the median of Values (0 when Missing)
	Limit  float64
	AtMost bool // Value must be ≤ Limit (else ≥)
	Met    bool
	// Values are the ratio in each repetition (Config.Repeat), where the figure was
	// measured in repetitions; the two sides of a ratio are paired by repetition.
	Values []float64 `json:",omitempty"`
	// Missing says which side of the ratio was not measured (skipped, failed or not
	// selected); Met is false then.
	Missing string `json:",omitempty"`
}

// studyVariants are the classic SETNX variants dlock keeps to show their flaws: no
// speed or fairness target applies to them.
var studyVariants = []string{"redis+setnx/getset", "redis+setnx/expire"}

// checks evaluates the targets against the rows of res.
func checks(res *Results) []Check {
	perRep := func(get func(*Repeats) []float64) func(*Row) []float64 {
		return func(r *Row) []float64 {
			if r == nil || r.Repeats == nil {
				return nil
			}
			return get(r.Repeats)
		}
	}
	p50 := perRep(func(r *Repeats) []float64 {
		out := make([]float64, len(r.P50))
		for i, d := range r.P50 {
			out[i] = float64(d)
		}
		return out
	})
	rate := perRep(func(r *Repeats) []float64 { return r.TransferRate })
	allocs := func(r *Row) []float64 {
		if r == nil || r.Allocs == nil {
			return nil
		}
		return []float64{r.Allocs.PerCycle}
	}
	verdict := func(c Check) Check {
		c.Value = median(c.Values)
		c.Met = c.AtMost && c.Value <= c.Limit || !c.AtMost && c.Value >= c.Limit
		return c
	}
	// ratio compares a with b, repetition by repetition.
	ratio := func(claim string, a, b string, get func(*Row) []float64, atMost bool, limit float64) Check {
		c := Check{Claim: claim, Limit: limit, AtMost: atMost}
		if res.Row(a) == nil && res.Row(b) == nil {
			return c // neither side selected: not reported
		}
		va, vb := get(res.Row(a)), get(res.Row(b))
		switch {
		case len(va) == 0:
			c.Missing = a
			return c
		case len(vb) == 0:
			c.Missing = b
			return c
		}
		for i := range min(len(va), len(vb)) {
			if vb[i] > 0 {
				c.Values = append(c.Values, va[i]/vb[i])
			}
		}
		if len(c.Values) == 0 {
			c.Missing = b
			return c
		}
		return verdict(c)
	}
	// raw compares a with its raw baseline, measured in turn in each repetition.
	raw := func(claim, a string, limit float64) Check {
		c := Check{Claim: claim, Limit: limit, AtMost: true}
		r := res.Row(a)
		switch {
		case r == nil:
			return c
		case r.Repeats == nil || len(r.Repeats.RawRatio) == 0:
			c.Missing = a
			return c
		}
		c.Values = r.Repeats.RawRatio
		return verdict(c)
	}
	// most holds a's value to an absolute limit.
	most := func(claim, a string, get func(*Row) []float64, limit float64) Check {
		c := Check{Claim: claim, Limit: limit, AtMost: true}
		r := res.Row(a)
		if r == nil {
			return c
		}
		if c.Values = get(r); len(c.Values) == 0 {
			c.Missing = a
			return c
		}
		return verdict(c)
	}
	var out []Check
	for _, c := range []Check{
		ratio("redis ≤ 1.05× bsm/redislock (uncontended p50)", "redis", "bsm/redislock", p50, true, 1.05),
		raw("redis ≤ 1.1× raw SET NX PX + DEL (uncontended p50)", "redis", 1.1),
		most("redis ≤ 25 allocations per cycle", "redis", allocs, 25),
		raw("redlock(5) ≤ 1.05× the raw parallel fan-out (uncontended p50)", "redlock(5)", 1.05),
		ratio("redlock(5) ≤ 1.0× redsync(5) (uncontended p50)", "redlock(5)", "redsync(5)", p50, true, 1.0),
		ratio("redlock(5) ≤ 1.0× redsync(5) (allocations per cycle)", "redlock(5)", "redsync(5)", allocs, true, 1.0),
		ratio("redlock(5) ≥ 3× redsync(5) (contended hand-offs/s)", "redlock(5)", "redsync(5)", rate, false, 3),
		ratio("zk ≤ 1.0× zk.Lock (uncontended p50)", "zk", "zk.Lock", p50, true, 1.0),
		ratio("zk ≥ 1.2× zk.Lock (contended hand-offs/s)", "zk", "zk.Lock", rate, false, 1.2),
		ratio("etcd ≤ 1.05× etcd-mutex (uncontended p50)", "etcd", "etcd-mutex", p50, true, 1.05),
		ratio("etcd ≥ 3× etcd-mutex (contended hand-offs/s)", "etcd", "etcd-mutex", rate, false, 3),
		raw("mysql ≤ 1.15× raw INSERT + DELETE (uncontended p50)", "mysql", 1.15),
		raw("postgres ≤ 1.1× raw INSERT ON CONFLICT DO NOTHING + DELETE (uncontended p50)", "postgres", 1.1),
		raw("postgres+advisory ≤ 1.1× raw pg_try_advisory_lock + pg_advisory_unlock (uncontended p50)", "postgres+advisory", 1.1),
	} {
		if c.Values != nil || c.Missing != "" {
			out = append(out, c)
		}
	}
	for _, r := range res.Rows {
		if r.Kind != Backend || slices.Contains(studyVariants, r.Name) {
			continue
		}
		if r.Repeats != nil && len(r.Repeats.MaxOverMean) > 0 {
			out = append(out, verdict(Check{Claim: r.Name + ": longest wait ≤ 5× mean wait (8 clients)", Values: r.Repeats.MaxOverMean, Limit: 5, AtMost: true}))
		}
		// The same bound counted in grants instead of time: a fair queue passes a
		// waiter one round of the other clients, so 5 rounds is the time bound's
		// counterpart, and stalls of the machine do not move it.
		if r.Repeats != nil && len(r.Repeats.MaxRounds) > 0 {
			out = append(out, verdict(Check{Claim: r.Name + ": longest wait ≤ 5 rounds of the other clients' grants (8 clients)", Values: r.Repeats.MaxRounds, Limit: 5, AtMost: true}))
		}
		flat := func(name string, s *Scaling) {
			if s == nil || len(s.Points) < 2 {
				return
			}
			first, last := s.Points[0], s.Points[len(s.Points)-1]
			// Issue 30's goals: a Redlock hand-off waits for a majority of masters,
			// so its rate may fall further with the load of more waiters.
			floor := 0.7
			if strings.HasPrefix(r.Name, "redlock") {
				floor = 0.5
			}
			out = append(out, verdict(Check{Claim: fmt.Sprintf("%s: hand-offs/s with %d waiters ≥ %.1f× with %d", name, last.Waiters, floor, first.Waiters),
				Values: s.Ratios(), Limit: floor}))
			if g := s.Growths(); len(g) > 0 {
				out = append(out, verdict(Check{Claim: fmt.Sprintf("%s: store requests per hand-off with %d waiters ≤ 1.2× with %d (flat)", name, last.Waiters, first.Waiters),
					Values: g, Limit: 1.2, AtMost: true}))
			}
		}
		flat(r.Name, r.Scaling)
		for _, p := range r.PrimScaling {
			flat(r.Name+" "+p.Primitive, p.Scaling)
		}
	}
	return out
}

// Markdown renders the results as one table of every target (raw baselines first in
// their store), the checks, and the setup.
func (r *Results) Markdown() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "# dlock-lab bench, %s\n\n", r.Started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %s %s/%s; load average %s at the start, %s at the end. Run took %v.\n\n",
		r.Machine.CPUs, orDash(r.Machine.CPU), r.Machine.GoVersion, r.Machine.OS, r.Machine.Arch,
		orDash(r.Machine.LoadBefore), orDash(r.Machine.LoadAfter), r.Elapsed.Round(time.Second))
	b.WriteString(r.Load.Sentence() + "\n\n")
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	b.WriteString("Absolute times are noisy on a shared machine; compare ratios within this run only.\n\n")
	fmt.Fprintf(&b, "| target | kind | uncontended p50 | p99 | ×raw | %d clients: grants/s | hand-offs/s | longest wait | max/mean wait | rounds passed | Jain | many keys (%d×%d) cycles/s | after a crash p50 / max (freed by) | allocs/cycle | B/cycle |\n",
		c.Clients, c.ManyClients, c.Keys)
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|\n")
	for _, row := range r.Rows {
		cells := []string{mdEscape(row.Name), string(row.Kind)}
		if row.Skipped != "" {
			cells = append(cells, "skipped: "+mdEscape(row.Skipped))
			for range 12 {
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
			cells = append(cells, fmt.Sprintf("%.0f", k.Rate)+unavail(k.Unavailable)+lostNote(k.Lost), fmt.Sprintf("%.0f", k.TransferRate), dur(k.Wait.Max), fmt.Sprintf("%.1f", k.MaxOverMean()), fmt.Sprintf("%.1f", k.MaxRounds()), fmt.Sprintf("%.3f", k.Jain))
		} else {
			cells = append(cells, "–", "–", "–", "–", "–", "–")
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
	b.WriteString(r.scalingMarkdown())
	b.WriteString(electionMultiMarkdown(r))
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
	fmt.Fprintf(&b, "\n| target (ratios from this run; median of %d repetitions) | measured | each repetition | limit | met |\n|---|--:|---|--:|---|\n", c.Repeat)
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
		fmt.Fprintf(&b, "| %s | %s | %s | %s %.2f | %s |\n", mdEscape(ch.Claim), v, ch.Each(), op, ch.Limit, met)
	}
	fmt.Fprintf(&b, "\nSetup: the uncontended and contended measurements ran %d times each (every target once before the next repetition); the table shows each row's median repetition. Uncontended = %d rounds (after %d warm-up rounds), each an Acquire+Release of every target and its raw baseline in turn, each on a client and key of its own, TTL %v. "+
		"Contended = %d clients (one connection or session each) acquiring one key for %v, releasing at once and asking again; grants/s counts every grant, hand-offs/s only those to another client than the previous holder (a client that takes the lock straight back adds a grant, not a hand-off); wait = from calling Acquire to holding; rounds passed = the most grants to other clients during one wait, over the clients less one (a fair queue passes a waiter one round; it does not grow with the machine's stalls as the longest wait in time does); Jain's index over the clients' grant counts. "+
		"Many keys = %d clients cycling through %d keys for %v. "+
		"Crash = a holder connected through TCP proxies takes the lock, another client starts waiting, %v later every proxy closes the holder's connections and refuses new ones (the holder never releases); the time from the cut to the waiter's grant, %d trials. "+
		"Allocations = heap allocations of the whole process per Acquire+Release over %d cycles. "+
		"Waiters = the contended measurement with each number of clients in turn, all of them %d times over (one target's repetitions in a row); requests = what the store's servers counted meanwhile (Redis commands, MySQL statements, ZooKeeper packets, etcd gRPC messages, PostgreSQL transactions), per hand-off; the table shows the repetition whose rate ratio (most ÷ fewest) is the median, and the checks the median of each repetition's ratio.\n",
		c.Repeat, c.Rounds, c.Warmup, c.TTL, c.Clients, c.Duration, c.ManyClients, c.Keys, c.Duration, crashHold, c.CrashTrials, c.AllocCycles, c.Repeat)
	return b.String()
}

// Each is the ratio of each repetition, e.g. "1.02, 0.98, 1.01" ("" for one).
func (c Check) Each() string {
	if len(c.Values) < 2 {
		return ""
	}
	var parts []string
	for _, v := range c.Values {
		parts = append(parts, fmt.Sprintf("%.2f", v))
	}
	return strings.Join(parts, ", ")
}

// Sentence says what the load was and whether the run was quiet, for a report.
func (l Load) Sentence() string {
	switch {
	case l.Before == "":
		return "Load average unknown: the results are not quiet."
	case l.Forced:
		return fmt.Sprintf("NOT QUIET: the load average was %s at the start (limit %.2f; forced), %s at the end. Do not commit these results.", l.Before, l.Limit, orDash(l.After))
	}
	waited := ""
	if l.Waited > 0 {
		waited = fmt.Sprintf(", after waiting %v for it", l.Waited)
	}
	return fmt.Sprintf("Quiet: the load average was %s at the start (below %.2f%s), %s at the end.", l.Before, l.Limit, waited, orDash(l.After))
}

// scalingMarkdown is the table of the scaling measurement ("" without one).
func (r *Results) scalingMarkdown() string {
	var b strings.Builder
	type named struct {
		name string
		s    *Scaling
	}
	var all []named
	for _, row := range r.Rows {
		all = append(all, named{row.Name, row.Scaling})
		for _, p := range row.PrimScaling {
			all = append(all, named{row.Name + " " + p.Primitive, p.Scaling})
		}
	}
	var cols []int // the numbers of waiters, from the row with the most points
	for _, row := range all {
		if row.s != nil && len(row.s.Points) > len(cols) {
			cols = cols[:0]
			for _, p := range row.s.Points {
				cols = append(cols, p.Waiters)
			}
		}
	}
	for _, row := range all {
		s := row.s
		if s == nil || len(s.Points) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\nWaiters on one key (hand-offs/s; store requests per hand-off):\n\n| target |")
			for _, n := range cols {
				fmt.Fprintf(&b, " %d waiters |", n)
			}
			b.WriteString(" most/fewest hand-offs/s | requests per hand-off, most/fewest |\n|---|")
			for range cols {
				b.WriteString("--:|")
			}
			b.WriteString("--:|--:|\n")
		}
		fmt.Fprintf(&b, "| %s |", mdEscape(row.name))
		for _, n := range cols {
			cell := "–"
			for _, p := range s.Points {
				if p.Waiters == n {
					cell = p.Cell()
				}
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		fmt.Fprintf(&b, " %s | %s |\n", ratioCell(s.Ratio()), ratioCell(s.Growth()))
	}
	return b.String()
}

// Cell renders the point as "hand-offs/s; requests per hand-off".
func (p ScalePoint) Cell() string {
	if p.PerHandoff > 0 {
		return fmt.Sprintf("%.0f; %.1f", p.TransferRate, p.PerHandoff)
	}
	return fmt.Sprintf("%.0f", p.TransferRate)
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
