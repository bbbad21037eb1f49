package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// Markdown renders the report: the header (date, machine, command), the guarantee
// matrices, the speed table, the evidence of every violation and the failures.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# dlock comparison report\n\n")
	r.header(&b, "- ")
	for _, m := range r.matrices() {
		fmt.Fprintf(&b, "\n## %s\n\n%s", m.Title, m.markdown())
	}
	if len(r.Cells) > 0 {
		b.WriteString("\n" + Legend + "\n")
	}
	if r.Speed != nil {
		b.WriteString("\n## Speed\n\n" + r.SpeedMarkdown())
		if s := r.ScalingMarkdown(); s != "" {
			b.WriteString("\n### More waiters on one key\n\n" + s)
		}
		if s := r.TargetsMarkdown(); s != "" {
			b.WriteString("\n### Speed targets\n\n" + s)
		}
	}
	if ev := r.evidence(""); len(ev) > 0 {
		b.WriteString("\n## Evidence and notes\n\n")
		for _, e := range ev {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	if len(r.Failures) > 0 {
		b.WriteString("\n## Failed tests\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// Legend explains the symbols of the Markdown matrices. Counts are of exercised
// trials: a trial whose fault did not take effect while it mattered does not count.
const Legend = "Legend: ✅ n/n held in every exercised trial · ⚠️ violated k/n, a declared weakness reproduced in k of n exercised trials · " +
	"⏸ unavailable · ❌ differs from the declaration (a test failed) · – not applicable · " +
	"(sometimes): a timing-dependent weakness, declared as such, seen in some trials and not in others · " +
	"(+m not exercised): m more trials ran whose fault did not take effect."

// markdown renders one matrix as a Markdown table.
func (m matrix) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| backend | %s |\n|---|%s\n", strings.Join(m.Cols, " | "), strings.Repeat("---|", len(m.Cols)))
	for _, row := range m.Rows {
		fmt.Fprintf(&b, "| %s |", row)
		for _, col := range m.Cols {
			c, ok := m.Cell[[2]string{row, col}]
			fmt.Fprintf(&b, " %s |", mdCell(c, ok))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// MatrixMarkdown renders one matrix of the report as a Markdown table: "conformance"
// (backend × property), "faults" (backend × scenario), a family of spec.Families
// ("semaphore": its properties; "semaphore-faults": its scenarios, each column
// named by the mutex scenario it mirrors), or "primitives" (properties of no
// family), with the rows of the backends whose names start with prefix
// (all for ""), and the columns where one of them has a cell that ran. It is empty
// when no such cells exist.
func (r *Report) MatrixMarkdown(which, prefix string) string {
	for _, m := range r.matrices() {
		if m.kind == which {
			if m = m.rowsWithPrefix(prefix); len(m.Rows) > 0 {
				return m.markdown()
			}
		}
	}
	return ""
}

// rowsWithPrefix keeps the rows whose names start with prefix, and the columns in
// which one of them has a cell that ran (not "not applicable").
func (m matrix) rowsWithPrefix(prefix string) matrix {
	if prefix == "" {
		return m
	}
	out := m
	out.Rows, out.Cols = nil, nil
	for _, row := range m.Rows {
		if strings.HasPrefix(row, prefix) {
			out.Rows = append(out.Rows, row)
		}
	}
	for _, col := range m.Cols {
		for _, row := range out.Rows {
			if c, ok := m.Cell[[2]string{row, col}]; ok && c.Status != spec.NotApplicable {
				out.Cols = append(out.Cols, col)
				break
			}
		}
	}
	return out
}

// SpeedMarkdown renders the speed table and its notes.
func (r *Report) SpeedMarkdown() string { return r.SpeedColumnsMarkdown(nil) }

// SpeedColumnsMarkdown renders the speed table's columns whose names contain one of
// words (case-insensitive; every column for none), the rows with a value in one of
// them, and the table's notes. It is empty when no column matches.
func (r *Report) SpeedColumnsMarkdown(words []string) string {
	if r.Speed == nil {
		return ""
	}
	var cols []int
	for i, c := range r.Speed.Columns {
		if len(words) == 0 || slices.ContainsFunc(words, func(w string) bool { return strings.Contains(strings.ToLower(c), strings.ToLower(w)) }) {
			cols = append(cols, i)
		}
	}
	if len(cols) == 0 {
		return ""
	}
	pick := func(vs []string) (out []string, any bool) {
		for _, i := range cols {
			v := ""
			if i < len(vs) {
				v = vs[i]
			}
			any = any || (v != "" && v != "–")
			out = append(out, v)
		}
		return out, any
	}
	names, _ := pick(r.Speed.Columns)
	var b strings.Builder
	fmt.Fprintf(&b, "| backend | %s |\n|---|%s\n", strings.Join(names, " | "), strings.Repeat("---|", len(names)))
	for _, row := range r.Speed.Rows {
		if vs, any := pick(row.Values); any || len(words) == 0 {
			fmt.Fprintf(&b, "| %s | %s |\n", row.Backend, strings.Join(vs, " | "))
		}
	}
	for _, n := range r.Speed.Notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}

// ScalingMarkdown renders the scaling measurement: a row per backend, a column per
// number of waiters with its hand-offs/s and store requests per hand-off ("" when
// the report has none).
func (r *Report) ScalingMarkdown() string {
	if r.Speed == nil || len(r.Speed.Scaling) == 0 {
		return ""
	}
	var waiters []int
	var backends []string
	at := map[string]map[int]ScalePoint{}
	for _, p := range r.Speed.Scaling {
		if !slices.Contains(waiters, p.Waiters) {
			waiters = append(waiters, p.Waiters)
		}
		if at[p.Backend] == nil {
			backends = append(backends, p.Backend)
			at[p.Backend] = map[int]ScalePoint{}
		}
		at[p.Backend][p.Waiters] = p
	}
	slices.Sort(waiters)
	var b strings.Builder
	b.WriteString("| backend |")
	for _, w := range waiters {
		fmt.Fprintf(&b, " %d waiters: hand-offs/s | requests per hand-off |", w)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("--:|--:|", len(waiters)))
	for _, be := range backends {
		fmt.Fprintf(&b, "| %s |", be)
		for _, w := range waiters {
			p, ok := at[be][w]
			switch {
			case !ok:
				b.WriteString(" – | – |")
			case p.PerHandoff > 0:
				fmt.Fprintf(&b, " %.0f | %.1f |", p.Handoffs, p.PerHandoff)
			default:
				fmt.Fprintf(&b, " %.0f | – |", p.Handoffs)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nHand-offs: grants to another client than the previous holder. Requests: what the store's servers counted during the measurement (Redis commands, MySQL statements, ZooKeeper packets, etcd gRPC messages, PostgreSQL transactions), renewals and wake-ups included.\n")
	return b.String()
}

// TargetsMarkdown renders the speed targets: each ratio measured in the run, its
// repetitions, the limit and whether it was met ("" when the report has none).
func (r *Report) TargetsMarkdown() string {
	if r.Speed == nil || len(r.Speed.Targets) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| target | measured (median) | each repetition | limit | met |\n|---|--:|---|--:|---|\n")
	for _, t := range r.Speed.Targets {
		v, met := fmt.Sprintf("%.2f", t.Value), "no"
		if t.Met {
			met = "yes"
		}
		if t.Missing != "" {
			v, met = "–", "not measured ("+t.Missing+")"
		}
		var each []string
		if len(t.Values) > 1 {
			for _, x := range t.Values {
				each = append(each, fmt.Sprintf("%.2f", x))
			}
		}
		op := "≥"
		if t.AtMost {
			op = "≤"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s %.2f | %s |\n", strings.ReplaceAll(t.Claim, "|", `\|`), v, strings.Join(each, ", "), op, t.Limit, met)
	}
	if l := r.Speed.Load; l != nil {
		q := "quiet"
		if !l.Quiet {
			q = "NOT quiet"
		}
		fmt.Fprintf(&b, "\nLoad average %s before the benchmarks, %s after (limit %.2f): %s.\n", l.Before, l.After, l.Limit, q)
	}
	return b.String()
}

// EvidenceMarkdown lists the evidence of the fault cells of backend (and of its
// configurations: "redis" covers "redis (master+replica)"), one bullet per cell.
func (r *Report) EvidenceMarkdown(backend string) string {
	var b strings.Builder
	for _, e := range r.evidence(backend) {
		fmt.Fprintf(&b, "- %s\n", e)
	}
	return b.String()
}

// FindCell returns the cell of backend × scenario (× property, if not empty): a
// cell that ran wins over a "not applicable" one.
func (r *Report) FindCell(backend, scenario, property string) (results.Cell, bool) {
	var found results.Cell
	ok := false
	for _, c := range r.Cells {
		if c.Backend != backend || c.Scenario != scenario || property != "" && c.Property != property {
			continue
		}
		if !ok || found.Status == spec.NotApplicable && c.Status != spec.NotApplicable {
			found, ok = c, true
		}
	}
	return found, ok
}

// Verdict is a cell in words, for prose, from its counts of exercised trials: "held
// 20/20", "violated 4/20 (sometimes)" (a timing-dependent weakness seen in some
// trials), "violated 20/20", "unavailable 5.8s", "not applicable", or "FAILED …" for a
// surprise. A cell whose trials did not all count says how many did not.
func Verdict(c results.Cell) string {
	if c.Stale != "" {
		return verdict(c) + " (stale: ran on " + c.Stale + ")"
	}
	return verdict(c)
}

func verdict(c results.Cell) string {
	switch kind(c, true) {
	case "na":
		return "not applicable"
	case "held":
		return fmt.Sprintf("held %d/%d%s", c.Counted(), c.Counted(), notExercised(c))
	case "weak":
		return fmt.Sprintf("violated %d/%d%s%s", c.Violations, c.Counted(), sometimesWord(c), notExercised(c))
	case "unavailable":
		return "unavailable" + unavailableFor(c)
	}
	return fmt.Sprintf("FAILED: %s (declared: %s)", c.Status, c.Expected)
}

// sometimesWord marks a timing-dependent weakness that showed in some trials only
// (never one violated in every trial).
func sometimesWord(c results.Cell) string {
	if c.Expected == spec.Sometimes && c.SomeTrials() {
		return " (sometimes)"
	}
	return ""
}

// notExercised says how many of a cell's trials did not count.
func notExercised(c results.Cell) string {
	if n := c.Trials - c.Counted(); n > 0 && c.Exercised > 0 {
		return fmt.Sprintf(" (+%d not exercised)", n)
	}
	return ""
}

func (r *Report) header(b *strings.Builder, bullet string) {
	if r.Date != "" {
		fmt.Fprintf(b, "%sDate: %s\n", bullet, r.Date)
	}
	if r.Machine != "" {
		fmt.Fprintf(b, "%sMachine: %s\n", bullet, r.Machine)
	}
	if r.Command != "" {
		fmt.Fprintf(b, "%sCommand: `%s`\n", bullet, r.Command)
	}
	if r.Campaign != "" {
		fmt.Fprintf(b, "%sCampaign: %s\n", bullet, campaignWords(r.Campaign))
	}
	if r.Trials > 0 {
		fmt.Fprintf(b, "%sExercised trials asked per fault scenario: %d\n", bullet, r.Trials)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "%s%s\n", bullet, n)
	}
}

func mdCell(c results.Cell, ok bool) string {
	if ok && c.Stale != "" {
		c2 := c
		c2.Stale = ""
		return mdCell(c2, ok) + " (stale: " + c.Stale + ")"
	}
	counts := ""
	if ok && c.Counted() > 1 {
		counts = fmt.Sprintf(" %d/%d", c.Violations, c.Counted())
	}
	switch kind(c, ok) {
	case "none", "na":
		return "–"
	case "held":
		if ok && c.Counted() > 1 {
			return fmt.Sprintf("✅ %d/%d%s", c.Counted(), c.Counted(), notExercised(c))
		}
		return "✅"
	case "weak":
		return "⚠️ violated" + counts + sometimesWord(c) + notExercised(c)
	case "unavailable":
		return "⏸ unavailable" + unavailableFor(c)
	}
	return fmt.Sprintf("❌ %s%s (declared: %s)", c.Status, counts, c.Expected)
}

func unavailableFor(c results.Cell) string {
	if c.Unavailable > 0 {
		return " " + c.Unavailable.Round(time.Millisecond).String()
	}
	return ""
}

// evidence lists, for every cell with evidence (of backend and its configurations,
// or of all when backend is ""), what was seen.
func (r *Report) evidence(backend string) []string {
	var out []string
	for _, c := range r.Cells {
		if len(c.Evidence) == 0 || backend != "" && c.Backend != backend && !strings.HasPrefix(c.Backend, backend+" (") {
			continue
		}
		line := fmt.Sprintf("**%s, %s / %s** (%s): %s", c.Backend, c.Scenario, c.Property, c.ShortStatus(), strings.Join(c.Evidence, "; "))
		if c.Margin != 0 {
			line += fmt.Sprintf(" (smallest margin %v)", c.Margin)
		}
		out = append(out, line)
	}
	return out
}

// abbrev shortens property and scenario names for a terminal's width.
var abbrev = map[string]string{
	"MutualExclusion": "MutEx", "DeadlockFreedom": "Deadlk", "OwnerOnlyRelease": "Owner",
	"Expiry": "Expiry", "Refresh": "Refrsh", "TryAcquire": "TryAcq", "Cancellation": "Cancel",
	"FencingMonotonic": "Fence", "KeyIsolation": "KeyIso", "InputValidation": "Input",
	"Close": "Close", "ConcurrentUse": "Concur", "DoneAndErr": "DoneEr", "NoGoroutineLeaks": "Leaks",
	"HolderCrash": "Crash", "HolderPause": "Pause", "HolderPauseFenced": "PauseF",
	"ServerRestart": "Restart", "Failover": "Failovr", "Partition": "Partit",
	"QuorumLoss": "Quorum", "LeaderKill": "Leader", "ClockJump": "Clock", "FIFO": "FIFO",
	"StoreHang": "Hang", "FailoverFencing": "FoFence", "LeaderKillLease": "LdrLse",
	"ClockJumpBareMajority": "Klepmnn",
}

func short(s string) string {
	if a, ok := abbrev[s]; ok {
		return a
	}
	if len(s) > 7 {
		return s[:7]
	}
	return s
}

// WriteSummary prints the matrices and the speed table for a terminal: one line per
// backend, a symbol per cell (ok held, weak = declared weakness reproduced, n/a,
// and !! for a surprise), then the legend and the surprises spelled out.
func (r *Report) WriteSummary(w io.Writer) {
	for _, m := range r.matrices() {
		fmt.Fprintf(w, "\n%s\n", m.Title)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		fmt.Fprint(tw, "backend")
		for _, col := range m.Cols {
			fmt.Fprintf(tw, "\t%s", short(col))
		}
		fmt.Fprintln(tw, "\t")
		for _, row := range m.Rows {
			fmt.Fprint(tw, row)
			for _, col := range m.Cols {
				c, ok := m.Cell[[2]string{row, col}]
				fmt.Fprintf(tw, "\t%s", textCell(c, ok))
			}
			fmt.Fprintln(tw, "\t")
		}
		tw.Flush()
	}
	if len(r.Cells) > 0 {
		fmt.Fprintln(w, "\nok = held in every exercised trial · weak k/n = a declared weakness, reproduced in k of n exercised trials · down = unavailable · - = not applicable · !! = not what the backend declares (not exercised included)")
	}
	if r.Speed != nil && len(r.Speed.Rows) > 0 {
		fmt.Fprintln(w, "\nSpeed")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "backend\t%s\t\n", strings.Join(r.Speed.Columns, "\t"))
		for _, row := range r.Speed.Rows {
			fmt.Fprintf(tw, "%s\t%s\t\n", row.Backend, strings.Join(row.Values, "\t"))
		}
		tw.Flush()
		for _, n := range r.Speed.Notes {
			fmt.Fprintf(w, "%s\n", n)
		}
	}
	for _, c := range r.Surprises() {
		fmt.Fprintf(w, "!! %s, %s / %s: %s, declared %s; %s\n", c.Backend, c.Scenario, c.Property, c.Status, c.Expected, strings.Join(c.Evidence, "; "))
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAILED %s\n", f)
	}
}

func textCell(c results.Cell, ok bool) string {
	switch kind(c, ok) {
	case "none", "na":
		return "-"
	case "held":
		return "ok"
	case "weak":
		if c.Counted() > 1 {
			return fmt.Sprintf("weak %d/%d", c.Violations, c.Counted())
		}
		return "weak"
	case "unavailable":
		return "down"
	}
	return "!!" + string(c.Status)
}

// campaignWords says what a campaign is.
func campaignWords(c string) string {
	switch c {
	case "quick":
		return "quick (few trials, one benchmark repetition: a first look, not evidence to commit)"
	case "full":
		return "full (the committed evidence: 20 exercised trials a fault cell, benchmarks repeated)"
	}
	return c
}
