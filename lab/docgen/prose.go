package docgen

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/spec"
)

// The rules Check applies to a document's prose (what is not a generated region, a
// marker, a code block or an HTML comment), sentence by sentence (a table row and a
// list item are sentences of their own):
//
//   - verdict: a sentence with a verdict word (held, violated, keeps, loses, survives,
//     frees, breaks, safe, refused, fails, … — verdictWordRE) that names a property or
//     scenario — backticked, inside a slash path (`TestFaults/single/ServerRestart`,
//     Conformance/FIFO) or bare (HolderPause; a single word like FIFO counts only
//     backticked or in a path) — carries a cell marker for every name it names: a
//     marker for another name does not vouch for it. A verdict word in a requirement
//     or a condition ("must be free", "whether … is kept") states what a scenario
//     checks, not what it found, and does not count; nor does a sentence that defines
//     a name ("- **StoreHang**: …", "| `MultiKeyExclusion` | …") count for that name.
//   - scope: a sentence with a verdict word and a scope word ("every backend", "all
//     backends", "each backend", "on all", "everywhere" — scopeRE) is about every
//     backend's cell of each name it names: those cells all have one verdict, and it
//     is the one the sentence states (held for held, keeps, frees, refused, …;
//     violated for violated, loses, breaks, …; "not", "never" invert). A not
//     applicable cell has no verdict: it makes the sentence false, except on a
//     configuration row ("zk (3-node ensemble)") whose backend has a row of its own.
//   - figure: a measurement — a duration (988 ms), a ratio (1.26×), a count (20/20,
//     5 of 40), a rate (3446 hand-offs/s, 1.99 per release), a percentage, a size
//     (37.8 MB) — comes from a marker or a generated region, or stands in a section
//     whose heading dates it with a day and a commit ("## An older run (2026-12-02,
//     a3d8d68)"): the figures of a run that is not the committed report, labelled as
//     such. Not measurements, and so exempt: what no figure pattern matches (versions,
//     ports, issue numbers, the size of a setup such as "64 clients" or "5 masters");
//     code (fenced blocks, and inline code that is more than a bare figure:
//     `wait_timeout=100ms`, `500ms`); a duration, percentage or size next to the
//     setting or limit it is (configWords: "a 2 s TTL", "every 1–8 ms", "TTL×1%", "at
//     most 255 bytes"); "k of n" next to the deployment it counts (deploymentWords:
//     "3 of 5 masters").

// Rule names, as Problem.Rule says them.
const (
	RuleVerdict = "verdict"
	RuleScope   = "scope"
	RuleFigure  = "figure"
)

var (
	verdictWordRE = regexp.MustCompile(`(?i)\b(held|holds?|violated|violates?|sometimes|keeps?|kept|loses?|lost|survives?|survived|frees?|freed|breaks?|broke|broken|safe|unsafe|refused|refuses?|fails?|failed|passes|passed)\b`)
	// negativeWords are the verdict words that say a property broke.
	negativeWords = map[string]bool{"violated": true, "violates": true, "violate": true, "sometimes": true, "loses": true, "lose": true,
		"lost": true, "breaks": true, "break": true, "broke": true, "broken": true, "unsafe": true, "fails": true, "fail": true, "failed": true}
	// modalRE: a verdict word after one of these is a requirement or a condition.
	modalRE    = regexp.MustCompile(`(?i)\b(must|should|whether|needs? to)\b(\s+\S+){0,3}\s*$`)
	negationRE = regexp.MustCompile(`(?i)(\b(not|never|no|cannot)\b|n't\b)(\s+\S+){0,2}\s*$`)
	scopeRE    = regexp.MustCompile(`(?i)\b(?:(?:every|each|all(?: the| of the)?|any) (?:backends?|stores?|peers?|locks? of the suite)\b|on all\b|all of them\b|everywhere\b)`)
	// definitionRE: "- **Name**: …", "| `Name` | …", "Name (…): …" at a sentence's start.
	definitionRE = regexp.MustCompile("^\\s*(?:[-*]\\s+|\\|\\s*)?(?:\\*\\*|`)?([A-Za-z]+)(?:\\*\\*|`)?(?:\\s*\\([^)]*\\))?\\s*[:|]")
	codeSpanRE   = regexp.MustCompile("`[^`\n]+`")
	wordRE       = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	compoundRE   = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*(?:-[A-Za-z_][A-Za-z0-9_]*)*`)
	pathRE       = regexp.MustCompile(`[A-Za-z0-9_+.*…=-]+(?:/[A-Za-z0-9_+.*…=-]+)+`)
	headingRE    = regexp.MustCompile(`(?m)^(#{1,6}) (.*)$`)
	dateRE       = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b`)
	commitRE     = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	markerRE     = regexp.MustCompile(`(?s)<!-- (cell|speed):([^>]*?) -->.*?<!-- /(?:cell|speed) -->`)
	commentRE    = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// The figures: a number (or a range of two) and what makes it a measurement.
const (
	num = `\d+(?:\.\d+)?`
	rng = num + `(?:\s?[–-]\s?` + num + `)?`
)

var figureREs = []struct {
	kind string
	re   *regexp.Regexp
}{
	{"duration", regexp.MustCompile(rng + `\s?(?:ns|µs|μs|us|ms|s|secs?|seconds?|mins?|minutes?|h|hours?|days?)\b`)},
	{"ratio", regexp.MustCompile(rng + `\s?×`)},
	{"percentage", regexp.MustCompile(rng + `\s?%`)},
	{"size", regexp.MustCompile(num + `\s?(?:[KMGT]i?B|bytes)\b`)},
	{"rate", regexp.MustCompile(num + `(?:\s?/s\b|\s(?:[a-z-]+/s\b|times a second|a second|per [a-z]+))`)},
	{"count", regexp.MustCompile(`\d+/\d+\b`)},
	{"k of n", regexp.MustCompile(`\d+ of \d+\b`)},
}

// configWords name a setting or a limit: a duration, percentage or size beside one of
// them (one of the two words before or after it) is its value, not a measurement.
var configWords = words("ttl ttls timeout timeouts session sessions session_timeout wait_timeout interval intervals delay delays deadline drift limit limits bound bounds tick ticktime retry retries backoff period every jump jumps skew ahead default defaults least most minimum maximum")

// deploymentWords name what a deployment is made of: "3 of 5 masters" counts them.
var deploymentWords = words("masters master nodes node members member servers server replicas replica links link")

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// prose is a document with everything but its prose blanked (offsets kept).
type prose struct {
	md, text string
	marks    []mark
	dated    [][2]int // sections whose heading dates them: [start, end)
}

// mark is an inline marker: where it is and which property or scenario it names.
type mark struct {
	at   int
	name string
}

func newProse(md string) *prose {
	p := &prose{md: md}
	b := []byte(md)
	blank := func(start, end int) {
		for i := start; i < end; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	for _, loc := range regionRE.FindAllStringIndex(md, -1) {
		blank(loc[0], loc[1])
	}
	for _, loc := range markerRE.FindAllStringSubmatchIndex(md, -1) {
		if md[loc[2]:loc[3]] == "cell" {
			parts := strings.Split(md[loc[4]:loc[5]], "|")
			if len(parts) >= 2 {
				p.marks = append(p.marks, mark{loc[0], strings.TrimPrefix(parts[1], "Conformance/")})
			}
		}
		blank(loc[0], loc[1])
	}
	for _, loc := range commentRE.FindAllStringIndex(string(b), -1) {
		blank(loc[0], loc[1])
	}
	// Fenced code blocks.
	off, fence := 0, -1
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if fence < 0 {
				fence = off
			} else {
				blank(fence, off+len(l))
				fence = -1
			}
		}
		off += len(l)
	}
	p.text = string(b)
	// Sections dated by their heading.
	hs := headingRE.FindAllStringSubmatchIndex(p.text, -1)
	for i, h := range hs {
		title := p.text[h[4]:h[5]]
		if !dateRE.MatchString(title) || !slices.ContainsFunc(commitRE.FindAllString(title, -1), hasDigit) {
			continue
		}
		level, end := h[3]-h[2], len(p.text)
		for _, n := range hs[i+1:] {
			if n[3]-n[2] <= level {
				end = n[0]
				break
			}
		}
		p.dated = append(p.dated, [2]int{h[0], end})
	}
	return p
}

func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }

func (p *prose) line(off int) int { return strings.Count(p.md[:off], "\n") + 1 }

func (p *prose) inDated(off int) bool {
	for _, d := range p.dated {
		if d[0] <= off && off < d[1] {
			return true
		}
	}
	return false
}

// mention is a property or scenario a sentence names.
type mention struct {
	name string
	at   int
}

// proseProblems applies the verdict, scope and figure rules to md.
func proseProblems(file, md string, r *report.Report) []Problem {
	p := newProse(md)
	names := knownNames()
	var out []Problem
	add := func(rule string, at int, format string, args ...any) {
		out = append(out, Problem{File: file, Line: p.line(at), Rule: rule, What: fmt.Sprintf(format, args...)})
	}
	for _, s := range sentences(p.text) {
		if strings.TrimSpace(s.text) == "" {
			continue
		}
		end := s.at + len(s.text)
		marked := map[string]bool{}
		for _, m := range p.marks {
			if s.at <= m.at && m.at < end {
				marked[m.name] = true
			}
		}
		// Code spans: names (a backticked name, or the parts of a backticked path);
		// outside them: bare names and paths, verdict and scope words, figures.
		plain := []byte(s.text)
		var ms []mention
		seen := map[string]bool{}
		addName := func(n string, at int) {
			if !seen[n] {
				seen[n] = true
				ms = append(ms, mention{n, at})
			}
		}
		var figures [][2]int // offsets in s.text of bare-figure code spans
		for _, loc := range codeSpanRE.FindAllStringIndex(s.text, -1) {
			code := s.text[loc[0]+1 : loc[1]-1]
			switch {
			case names[code] && !methodNames[code]:
				addName(code, s.at+loc[0])
			case strings.Contains(code, "/"):
				for _, part := range strings.Split(code, "/") {
					if names[part] {
						addName(part, s.at+loc[0])
					}
				}
			}
			if isBareFigure(code) {
				figures = append(figures, [2]int{loc[0] + 1, loc[1] - 1})
			}
			for i := loc[0]; i < loc[1]; i++ {
				plain[i] = ' '
			}
		}
		for _, f := range figures { // a bare figure in backticks is a figure all the same
			copy(plain[f[0]:f[1]], s.text[f[0]:f[1]])
		}
		text := string(plain)
		for _, loc := range pathRE.FindAllStringIndex(text, -1) {
			for _, part := range strings.Split(text[loc[0]:loc[1]], "/") {
				if names[part] {
					addName(part, s.at+loc[0])
				}
			}
		}
		for _, loc := range wordRE.FindAllStringIndex(text, -1) {
			w := text[loc[0]:loc[1]]
			if names[w] && looksLikeClaimName(w) && !methodNames[w] {
				addName(w, s.at+loc[0])
			}
		}
		// A sentence that opens with a name and a colon (or a table's next cell) defines
		// it: what it says of that name is what the name demands.
		if d := definitionRE.FindStringSubmatch(s.text); d != nil && seen[d[1]] {
			ms = slices.DeleteFunc(ms, func(m mention) bool { return m.name == d[1] })
		}
		// Verdict words, other than in requirements and conditions, with their polarity.
		var stated []bool // true: held; false: violated
		for _, loc := range verdictWordRE.FindAllStringIndex(text, -1) {
			before := text[:loc[0]]
			if modalRE.MatchString(before) {
				continue
			}
			neg := negativeWords[strings.ToLower(text[loc[0]:loc[1]])]
			if negationRE.MatchString(before) {
				neg = !neg
			}
			stated = append(stated, !neg)
		}
		if len(stated) > 0 {
			for _, m := range ms {
				if !marked[m.name] {
					add(RuleVerdict, m.at, "a verdict on %s without a cell marker for it: %q", m.name, clip(s.text))
				}
			}
			if scopeRE.MatchString(text) {
				for _, m := range ms {
					if why := scopeFalse(r, m.name, stated); why != "" {
						add(RuleScope, m.at, "%q speaks of every backend, but %s", clip(s.text), why)
					}
				}
			}
		}
		for _, f := range measurements(text) {
			if !p.inDated(s.at + f[0]) {
				add(RuleFigure, s.at+f[0], "the figure %q is no marker's (a measurement comes from the report, or stands in a section headed with its date and commit): %q",
					text[f[0]:f[1]], clip(s.text))
			}
		}
	}
	return out
}

// isBareFigure reports whether code is nothing but a figure written as prose is
// (`988 ms`, `1.26×`, `20/20`): a Go duration (`500ms`) or a flag's value is code.
func isBareFigure(code string) bool {
	if !strings.ContainsAny(code, " ×%/") {
		return false
	}
	for _, f := range figureREs {
		if loc := f.re.FindStringIndex(code); loc != nil && loc[0] == 0 && loc[1] == len(code) {
			return true
		}
	}
	return false
}

// measurements returns the spans of text that are measurements.
func measurements(text string) [][2]int {
	var out [][2]int
	for _, f := range figureREs {
		for _, loc := range f.re.FindAllStringIndex(text, -1) {
			if loc[0] > 0 && strings.ContainsAny(text[loc[0]-1:loc[0]], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./") {
				continue // part of a word, a version, a path
			}
			if f.kind == "count" && loc[1] < len(text) && text[loc[1]] == '/' {
				continue // a path
			}
			exempt := configWords
			switch f.kind {
			case "k of n":
				exempt = deploymentWords
			case "ratio", "rate", "count":
				exempt = nil
			}
			if nearWord(text, loc, exempt) {
				continue
			}
			overlaps := false
			for _, o := range out {
				if loc[0] < o[1] && o[0] < loc[1] {
					overlaps = true
				}
			}
			if !overlaps {
				out = append(out, [2]int{loc[0], loc[1]})
			}
		}
	}
	slices.SortFunc(out, func(a, b [2]int) int { return a[0] - b[0] })
	return out
}

// nearWord reports whether one of the two words before or after loc in text is in set
// (a hyphenated word is one word: "a 5 s per-node timeout").
func nearWord(text string, loc []int, set map[string]bool) bool {
	if len(set) == 0 {
		return false
	}
	before := compoundRE.FindAllString(text[:loc[0]], -1)
	after := compoundRE.FindAllString(text[loc[1]:], 2)
	if len(before) > 2 {
		before = before[len(before)-2:]
	}
	for _, w := range append(before, after...) {
		for _, part := range strings.Split(w, "-") { // "per-node timeout": its parts
			if set[strings.ToLower(part)] {
				return true
			}
		}
	}
	return false
}

// scopeFalse says why "name … on every backend" with the stated verdicts is false in
// r ("" when it is true): every backend's cell of name must have one verdict, and the
// sentence must state it.
func scopeFalse(r *report.Report, name string, stated []bool) string {
	scenario, property := name, ""
	if isProperty(name) {
		scenario, property = "Conformance", name
	}
	var rows []string
	for _, c := range r.Cells {
		if (c.Scenario == scenario && (property == "" || c.Property == property)) && !slices.Contains(rows, c.Backend) {
			rows = append(rows, c.Backend)
		}
	}
	if len(rows) == 0 {
		return fmt.Sprintf("the report has no cell of %s", name)
	}
	by := map[string][]string{}
	for _, row := range rows {
		c, _ := r.FindCell(row, scenario, property)
		if c.Status == spec.NotApplicable && isConfigurationOf(r, row, scenario, property) {
			continue
		}
		v := string(c.Status)
		by[v] = append(by[v], row)
	}
	if len(by) == 1 {
		for v := range by {
			if v == string(spec.Held) && slices.Contains(stated, true) || v == string(spec.Violated) && slices.Contains(stated, false) {
				return ""
			}
		}
	}
	var parts []string
	for _, v := range []string{string(spec.Held), string(spec.Violated), string(spec.NotApplicable), string(spec.Unavailable), string(spec.NotExercised)} {
		if rs := by[v]; len(rs) > 0 {
			parts = append(parts, fmt.Sprintf("%s is %s on %s", name, v, listShort(rs)))
			delete(by, v)
		}
	}
	for v, rs := range by {
		parts = append(parts, fmt.Sprintf("%s is %s on %s", name, v, listShort(rs)))
	}
	return "in the report " + strings.Join(parts, "; ")
}

// isConfigurationOf reports whether row is a configuration of a backend ("zk (3-node
// ensemble)") that has a row of its own with a cell of scenario (× property).
func isConfigurationOf(r *report.Report, row, scenario, property string) bool {
	base, _, ok := strings.Cut(row, " (")
	if !ok {
		return false
	}
	_, found := r.FindCell(base, scenario, property)
	return found
}

func isProperty(name string) bool {
	return slices.Contains(spec.Properties, spec.Property(name)) || slices.Contains(spec.PrimitiveProperties, spec.Property(name))
}

func listShort(rows []string) string {
	if len(rows) > 4 {
		return strings.Join(rows[:4], ", ") + fmt.Sprintf(" and %d more", len(rows)-4)
	}
	return strings.Join(rows, ", ")
}
