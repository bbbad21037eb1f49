// Package docgen keeps the project's Markdown documents in step with the committed
// report (docs/results/<date>/report.json): every figure and verdict a document
// states about a backend comes from the report, and a test fails when one differs.
//
// Three kinds of markers, invisible when the Markdown is rendered:
//
//	<!-- generated:NAME -->            a whole region (a table, a list), rendered
//	…                                  from the report by Render(NAME)
//	<!-- /generated:NAME -->
//
//	<!-- cell:BACKEND|SCENARIO -->held 20/20<!-- /cell -->
//	                                   a verdict in prose: the cell's Verdict
//	<!-- cell:BACKEND|SCENARIO|FIELD -->1.8s<!-- /cell -->
//	                                   a figure of the cell: margin, unavailable, trials
//	<!-- speed:BACKEND|COLUMN -->114µs<!-- /speed -->
//	                                   a value of the speed table
//
// SCENARIO is a fault scenario or "Conformance/PROPERTY". Update rewrites every
// marker's content; Check reports markers whose content differs, markers that name
// no cell, backticked names that look like a property or scenario but are neither
// that nor a Go identifier of the project, and, in the prose (prose.go): a verdict
// word next to a property or scenario without a cell marker for it, a scope word
// ("every backend") that the report's cells contradict, and a measured figure that
// comes from no marker and stands in no section dated as an older run.
package docgen

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/spec"
)

// Problem is one disagreement between a document and the report.
type Problem struct {
	File, What string
	Line       int
	// Rule names the prose rule a problem breaks (RuleVerdict, RuleScope,
	// RuleFigure); "" for a marker, a region or a name.
	Rule string
}

func (p Problem) String() string {
	if p.Rule != "" {
		return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Rule, p.What)
	}
	return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.What)
}

var (
	regionRE = regexp.MustCompile(`(?s)<!-- generated:([^ ]+) -->\n(.*?)<!-- /generated:([^ ]+) -->`)
	inlineRE = regexp.MustCompile(`<!-- (cell|speed):([^>]*?) -->(.*?)<!-- /(cell|speed) -->`)
	tickedRE = regexp.MustCompile("`([A-Z][A-Za-z]+)`")
)

// Render renders the region NAME from r:
//
//	matrix:conformance, matrix:faults                      a matrix and its legend;
//	matrix:semaphore, matrix:semaphore-faults, …           a family's (spec.Families);
//	matrix:WHICH:PREFIX                                    …of the backends named PREFIX…
//	speed                                                  the speed table
//	speed:WORD,WORD                                        …its columns named with a WORD
//	scaling                                                hand-offs/s and requests per hand-off by waiters
//	targets                                                the speed targets and whether each was met
//	targets:SUBJECT,SUBJECT                                …those about SUBJECT ("redis", "redis fifo")
//	evidence:BACKEND                                       BACKEND's fault evidence
//	run                                                    when, where and how the report was made
//	readme-backends                                        the README's backend table
func Render(name string, r *report.Report) (string, error) {
	kind, arg, _ := strings.Cut(name, ":")
	switch kind {
	case "matrix":
		which, prefix, _ := strings.Cut(arg, ":")
		m := r.MatrixMarkdown(which, prefix)
		if m == "" {
			return "", fmt.Errorf("the report has no %s cells of backends %q…", which, prefix)
		}
		return m + "\n" + report.Legend + "\n", nil
	case "speed":
		var words []string
		if arg != "" { // a region's name has no space: "at-once" matches "at once"
			words = strings.Split(strings.ReplaceAll(arg, "-", " "), ",")
		}
		if t := r.SpeedColumnsMarkdown(words); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("the report has no speed table (or no column with %q)", arg)
	case "scaling":
		if t := r.ScalingMarkdown(); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("the report has no scaling measurement")
	case "targets":
		if arg != "" { // a region's name has no space: "redis-fifo" is "redis fifo"
			r = targetsOf(r, strings.Split(strings.ReplaceAll(arg, "-", " "), ","))
		}
		if t := r.TargetsMarkdown(); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("the report has no speed targets (about %q)", arg)
	case "evidence":
		ev := r.EvidenceMarkdown(arg)
		if ev == "" {
			return "", fmt.Errorf("the report has no evidence for %q", arg)
		}
		return ev, nil
	case "run":
		return runSummary(r), nil
	case "readme-backends":
		return readmeBackends(r)
	}
	return "", fmt.Errorf("no region %q", name)
}

// targetsOf returns a copy of r whose speed targets are those about one of subjects:
// a target's subject is what its claim says before " ≤", " ≥" or ":" ("redis ≤ 1.05×
// bsm/redislock …" is about redis, "redis fifo: longest wait …" about redis fifo).
func targetsOf(r *report.Report, subjects []string) *report.Report {
	if r.Speed == nil {
		return r
	}
	cp, sp := *r, *r.Speed
	sp.Targets = nil
	for _, t := range r.Speed.Targets {
		subject := t.Claim
		if i := strings.IndexAny(subject, ":≤≥"); i >= 0 {
			subject = strings.TrimSpace(subject[:i])
		}
		if slices.Contains(subjects, subject) {
			sp.Targets = append(sp.Targets, t)
		}
	}
	cp.Speed = &sp
	return &cp
}

func runSummary(r *report.Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- date: %s\n- machine: %s\n", r.Date, r.Machine)
	if r.Command != "" {
		fmt.Fprintf(&b, "- command: `%s`\n", r.Command)
	}
	fmt.Fprintf(&b, "- trials per fault scenario: %d\n", r.Trials)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// inline renders the content of an inline marker.
func inline(kind, spec string, r *report.Report) (string, error) {
	parts := strings.Split(spec, "|")
	if kind == "speed" {
		if len(parts) != 2 || r.Speed == nil {
			return "", fmt.Errorf("speed marker %q: want BACKEND|COLUMN and a speed table", spec)
		}
		col := slices.Index(r.Speed.Columns, parts[1])
		if col < 0 {
			return "", fmt.Errorf("speed marker %q: no column %q", spec, parts[1])
		}
		for _, row := range r.Speed.Rows {
			if row.Backend == parts[0] && col < len(row.Values) {
				return row.Values[col], nil
			}
		}
		return "", fmt.Errorf("speed marker %q: no row %q", spec, parts[0])
	}
	if len(parts) < 2 || len(parts) > 3 {
		return "", fmt.Errorf("cell marker %q: want BACKEND|SCENARIO[|FIELD]", spec)
	}
	scenario, property := parts[1], ""
	if p, ok := strings.CutPrefix(scenario, "Conformance/"); ok {
		scenario, property = "Conformance", p
	}
	c, ok := r.FindCell(parts[0], scenario, property)
	if !ok {
		return "", fmt.Errorf("cell marker %q: the report has no such cell", spec)
	}
	if len(parts) == 2 {
		return report.Verdict(c), nil
	}
	switch parts[2] {
	case "margin":
		return c.Margin.Round(1e6).String(), nil
	case "unavailable":
		return c.Unavailable.Round(1e6).String(), nil
	case "trials":
		return fmt.Sprint(c.Trials), nil
	}
	return "", fmt.Errorf("cell marker %q: no field %q (margin, unavailable, trials)", spec, parts[2])
}

// Update returns md with every marker's content rendered from r.
func Update(md string, r *report.Report) (string, error) {
	var errs []string
	md = regionRE.ReplaceAllStringFunc(md, func(m string) string {
		g := regionRE.FindStringSubmatch(m)
		out, err := Render(g[1], r)
		if err != nil {
			errs = append(errs, err.Error())
			return m
		}
		return "<!-- generated:" + g[1] + " -->\n" + out + "<!-- /generated:" + g[1] + " -->"
	})
	md = inlineRE.ReplaceAllStringFunc(md, func(m string) string {
		g := inlineRE.FindStringSubmatch(m)
		out, err := inline(g[1], g[2], r)
		if err != nil {
			errs = append(errs, err.Error())
			return m
		}
		return "<!-- " + g[1] + ":" + g[2] + " -->" + out + "<!-- /" + g[1] + " -->"
	})
	if len(errs) > 0 {
		return md, fmt.Errorf("docgen: %s", strings.Join(errs, "; "))
	}
	return md, nil
}

// Check reports where the document md (named file) disagrees with r. identifiers
// are the names a backticked word may be besides a property or scenario (the
// project's Go identifiers).
func Check(file, md string, r *report.Report, identifiers map[string]bool) []Problem {
	var out []Problem
	line := func(off int) int { return strings.Count(md[:off], "\n") + 1 }
	for _, loc := range regionRE.FindAllStringSubmatchIndex(md, -1) {
		name, body, end := md[loc[2]:loc[3]], md[loc[4]:loc[5]], md[loc[6]:loc[7]]
		if name != end {
			out = append(out, Problem{File: file, What: fmt.Sprintf("region %q closed as %q", name, end), Line: line(loc[0])})
			continue
		}
		want, err := Render(name, r)
		switch {
		case err != nil:
			out = append(out, Problem{File: file, What: err.Error(), Line: line(loc[0])})
		case want != body:
			out = append(out, Problem{File: file, What: fmt.Sprintf("region %q differs from what the report renders (run `dlock-lab docs`)", name), Line: line(loc[0])})
		}
	}
	for _, loc := range inlineRE.FindAllStringSubmatchIndex(md, -1) {
		kind, spec, body := md[loc[2]:loc[3]], md[loc[4]:loc[5]], md[loc[6]:loc[7]]
		want, err := inline(kind, spec, r)
		switch {
		case err != nil:
			out = append(out, Problem{File: file, What: err.Error(), Line: line(loc[0])})
		case want != body:
			out = append(out, Problem{File: file, What: fmt.Sprintf("%s %q says %q, the report %q", kind, spec, body, want), Line: line(loc[0])})
		}
	}
	names := knownNames()
	for _, m := range tickedRE.FindAllStringSubmatchIndex(md, -1) {
		w := md[m[2]:m[3]]
		if !names[w] && !identifiers[w] && looksLikeClaimName(w) {
			out = append(out, Problem{File: file, What: fmt.Sprintf("`%s` is no property, scenario or identifier of this project", w), Line: line(m[0])})
		}
	}
	return append(out, proseProblems(file, md, r)...)
}

// methodNames are property names that are also methods of the API (`TryAcquire`,
// `Refresh`, `Close`): a sentence about the method is no verdict on the property.
var methodNames = map[string]bool{"TryAcquire": true, "Refresh": true, "Close": true}

// looksLikeClaimName reports whether a backticked word reads as the name of a
// property or scenario (two or more capitalized parts, like HolderCrash; a word in
// capitals only, like INCR, is a command).
func looksLikeClaimName(w string) bool {
	caps, lower := 0, false
	for _, c := range w {
		switch {
		case c >= 'A' && c <= 'Z':
			caps++
		case c >= 'a' && c <= 'z':
			lower = true
		}
	}
	return caps >= 2 && lower
}

// knownNames are every property and scenario name.
func knownNames() map[string]bool {
	m := map[string]bool{}
	for _, p := range spec.Properties {
		m[string(p)] = true
	}
	for _, s := range spec.Scenarios {
		m[string(s)] = true
	}
	for _, p := range spec.PrimitiveProperties {
		m[string(p)] = true
	}
	for _, s := range spec.PrimitiveScenarios {
		m[string(s)] = true
	}
	return m
}

type sentence struct {
	text string
	at   int
}

// sentences splits prose at sentence ends and paragraph breaks: a blank line (or one
// of spaces only), and the start of a table row, a list item, a heading or a quote
// (each a sentence of its own).
func sentences(s string) []sentence {
	var out []sentence
	start := 0
	for i := 0; i < len(s); i++ {
		end := false
		switch {
		case s[i] == '\n':
			rest := strings.TrimLeft(s[i+1:], " \t")
			end = rest == "" || rest[0] == '\n' || rest[0] == '|' || rest[0] == '#' || rest[0] == '>' ||
				strings.HasPrefix(rest, "- ") || strings.HasPrefix(rest, "* ") || numbered(rest)
		case s[i] == '.' && i+1 < len(s) && (s[i+1] == ' ' || s[i+1] == '\n'):
			end = true
		}
		if end {
			out = append(out, sentence{s[start : i+1], start})
			start = i + 1
		}
	}
	return append(out, sentence{s[start:], start})
}

// numbered reports whether s starts a numbered list item ("1. ").
func numbered(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i > 0 && strings.HasPrefix(s[i:], ". ")
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}
