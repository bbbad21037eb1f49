package report

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/results"
)

// HTML renders the report as one self-contained page: inline CSS, inline SVG charts
// (latency distribution per backend, hand-off rates) and the guarantee matrices as
// coloured tables whose cells carry their evidence as tooltips. A few lines of inline
// script mark the page as rendered (<body data-rendered="ok">, and the title) so
// that a headless browser can tell a page whose script failed. Nothing is fetched.
func (r *Report) HTML() ([]byte, error) {
	type cellView struct {
		Class, Text, Title string
		Links              []link // the cell's kept histories and visualizations
	}
	type rowView struct {
		Backend string
		Cells   []cellView
	}
	type matrixView struct {
		Title string
		Cols  []string
		Rows  []rowView
	}
	var ms []matrixView
	for _, m := range r.matrices() {
		mv := matrixView{Title: m.Title, Cols: m.Cols}
		for _, row := range m.Rows {
			rv := rowView{Backend: row}
			for _, col := range m.Cols {
				c, ok := m.Cell[[2]string{row, col}]
				rv.Cells = append(rv.Cells, cellView{Class: kind(c, ok), Text: textCell(c, ok), Title: cellTitle(c, ok), Links: cellLinks(c)})
			}
			mv.Rows = append(mv.Rows, rv)
		}
		ms = append(ms, mv)
	}
	var header strings.Builder
	r.header(&header, "")
	data := map[string]any{
		"Header":      strings.Split(strings.TrimSpace(header.String()), "\n"),
		"Matrices":    ms,
		"Legend":      legend,
		"Speed":       r.Speed,
		"Latency":     template.HTML(""),
		"Handoffs":    template.HTML(""),
		"ScalingRate": template.HTML(""), "ScalingRequests": template.HTML(""),
		"Evidence":  plain(r.evidence("")),
		"Failures":  r.Failures,
		"Surprises": len(r.Surprises()),
	}
	if r.Speed != nil {
		data["Latency"] = template.HTML(latencySVG(r.Speed.Latency))
		data["Handoffs"] = template.HTML(rateSVG(r.Speed.Handoffs))
		rate, reqs := scalingSVGs(r.Speed.Scaling)
		data["ScalingRate"], data["ScalingRequests"] = template.HTML(rate), template.HTML(reqs)
	}
	var b bytes.Buffer
	if err := page.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("report: html: %w", err)
	}
	return b.Bytes(), nil
}

// link is one file a cell links to.
type link struct{ Href, Text string }

// cellLinks are the histories (h1, h2, …) and porcupine's visualizations (v1, …) a
// cell kept, relative to the report.
func cellLinks(c results.Cell) []link {
	var out []link
	for i, h := range c.Visualizations {
		out = append(out, link{h, fmt.Sprintf("v%d", i+1)})
	}
	for i, h := range c.Histories {
		out = append(out, link{h, fmt.Sprintf("h%d", i+1)})
	}
	return out
}

// plain drops the Markdown emphasis of evidence lines.
func plain(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.ReplaceAll(l, "**", "")
	}
	return out
}

func cellTitle(c results.Cell, ok bool) string {
	if !ok {
		return "not run"
	}
	t := fmt.Sprintf("%s / %s on %s: %s", c.Scenario, c.Property, c.Backend, c.ShortStatus())
	if c.Expected != "" {
		t += ", declared " + string(c.Expected)
	}
	if c.Unavailable > 0 {
		t += fmt.Sprintf(", unavailable for %v", c.Unavailable.Round(time.Millisecond))
	}
	if c.Margin != 0 {
		t += fmt.Sprintf(", smallest margin %v", c.Margin)
	}
	if len(c.Evidence) > 0 {
		t += "\n" + strings.Join(c.Evidence, "\n")
	}
	return t
}

// Chart geometry shared by the SVG charts.
const (
	chartW   = 900
	labelW   = 230
	rowH     = 26
	axisH    = 30
	plotLeft = labelW + 10
	plotW    = chartW - plotLeft - 20
)

// latencySVG draws one row per backend on a log time axis: a bar from p50 to p99,
// a dot at p50, a tick at p90 and a cross at the maximum.
func latencySVG(ls []Latency) string {
	if len(ls) == 0 {
		return ""
	}
	lo, hi := math.Inf(1), 0.0
	for _, l := range ls {
		if l.P50 > 0 {
			lo = math.Min(lo, float64(l.P50))
		}
		hi = math.Max(hi, float64(max(l.Max, l.P99)))
	}
	if hi <= 0 || math.IsInf(lo, 1) {
		return ""
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	x := func(d time.Duration) float64 {
		v := math.Max(float64(d), lo)
		return plotLeft + plotW*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	h := axisH + rowH*len(ls) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="latency distribution per backend" width="%d" height="%d" viewBox="0 0 %d %d">`, chartW, h, chartW, h)
	for p := lo; p <= hi*1.0001; p *= 10 {
		px := x(time.Duration(p))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="grid"/><text x="%.1f" y="%d" class="axis" text-anchor="middle">%s</text>`,
			px, axisH-8, px, h-5, px, axisH-12, html.EscapeString(time.Duration(p).String()))
	}
	for i, l := range ls {
		y := axisH + i*rowH + rowH/2
		fmt.Fprintf(&b, `<g><title>%s</title>`, html.EscapeString(fmt.Sprintf("%s: n=%d p50=%v p90=%v p99=%v max=%v", l.Backend, l.N, l.P50, l.P90, l.P99, l.Max)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="label" text-anchor="end">%s</text>`, labelW, y+4, html.EscapeString(l.Backend))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="range"/>`, x(l.P50), y, x(l.P99), y)
		if l.P90 > 0 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" class="tick"/>`, x(l.P90), y-6, x(l.P90), y+6)
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="5" class="p50"/>`, x(l.P50), y)
		mx := x(l.Max)
		fmt.Fprintf(&b, `<path d="M%.1f %d l8 8 m0 -8 l-8 8" class="max"/>`, mx-4, y-4)
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// rateSVG draws a horizontal bar per backend, longest = fastest.
func rateSVG(rs []Rate) string { return barSVG(rs, "hand-offs per second", "/s") }

// scalingSVGs draws the scaling measurement: hand-offs/s, and store requests per
// hand-off, of each backend with each number of waiters (a bar each).
func scalingSVGs(ps []ScalePoint) (rate, requests string) {
	var rs, qs []Rate
	for _, p := range ps {
		rs = append(rs, Rate{Backend: p.Backend, Clients: p.Waiters, PerSecond: p.Handoffs})
		if p.PerHandoff > 0 {
			qs = append(qs, Rate{Backend: p.Backend, Clients: p.Waiters, PerSecond: p.PerHandoff})
		}
	}
	return barSVG(rs, "hand-offs per second by waiters", "/s"), barSVG(qs, "store requests per hand-off by waiters", "")
}

// barSVG draws a horizontal bar per rate, longest = largest; unit follows each value.
func barSVG(rs []Rate, what, unit string) string {
	if len(rs) == 0 {
		return ""
	}
	// Scale to the fastest, unless it is more than ten times the next (the in-process
	// backend): then it is drawn clipped, so that the others stay readable.
	var sorted []float64
	for _, r := range rs {
		sorted = append(sorted, r.PerSecond)
	}
	slices.Sort(sorted)
	top := sorted[len(sorted)-1]
	if len(sorted) > 1 && sorted[len(sorted)-2] > 0 && top > 10*sorted[len(sorted)-2] {
		top = 1.2 * sorted[len(sorted)-2]
	}
	if top <= 0 {
		return ""
	}
	h := rowH*len(rs) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="%s" width="%d" height="%d" viewBox="0 0 %d %d">`, html.EscapeString(what), chartW, h, chartW, h)
	for i, r := range rs {
		y := i*rowH + 4
		w := math.Max(1, (plotW-80)*math.Min(r.PerSecond, top)/top)
		clipped := r.PerSecond > top
		label := r.Backend
		if r.Clients > 0 {
			label = fmt.Sprintf("%s (%d clients)", r.Backend, r.Clients)
		}
		if i > 0 && rs[i-1].Backend == r.Backend && r.Clients > 0 {
			label = fmt.Sprintf("%d clients", r.Clients) // the backend is named on its first bar
		}
		fmt.Fprintf(&b, `<g><title>%s</title>`, html.EscapeString(fmt.Sprintf("%s: %.1f%s", label, r.PerSecond, unit)))
		fmt.Fprintf(&b, `<text x="%d" y="%d" class="label" text-anchor="end">%s</text>`, labelW, y+rowH/2+2, html.EscapeString(label))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" class="bar"/>`, plotLeft, y+2, w, rowH-8)
		if clipped {
			fmt.Fprintf(&b, `<path d="M%.1f %d l6 %d" class="clip"/>`, float64(plotLeft)+w-20, y, rowH-4)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" class="axis">%s%s%s</text></g>`, float64(plotLeft)+w+6, y+rowH/2+2, barValue(r.PerSecond), unit, map[bool]string{true: " (off scale)"}[clipped])
	}
	b.WriteString(`</svg>`)
	return b.String()
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dlock comparison report</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #1d2430; background: #fff; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #d0d7de; padding: 4px 7px; text-align: center; white-space: nowrap; }
th.backend, td.backend { text-align: left; font-weight: 600; }
th.col { writing-mode: vertical-rl; transform: rotate(180deg); height: 11em; vertical-align: bottom; }
td.held { background: #c8efcf; } td.weak { background: #ffd98a; } td.unavailable { background: #cfe0ff; }
td.surprise { background: #ff8f8f; font-weight: 700; } td.na, td.none { background: #f3f4f6; color: #8a94a3; }
td[title] { cursor: help; }
.legend span { display: inline-block; padding: 2px 8px; margin: 2px 6px 2px 0; border: 1px solid #d0d7de; }
.legend .held { background: #c8efcf; } .legend .weak { background: #ffd98a; } .legend .unavailable { background: #cfe0ff; }
.legend .surprise { background: #ff8f8f; } .legend .na { background: #f3f4f6; }
svg .grid { stroke: #e5e7eb; } svg .axis { font-size: 11px; fill: #57606a; } svg .label { font-size: 12px; fill: #1d2430; }
svg .range { stroke: #2f6fdb; stroke-width: 6; stroke-linecap: round; opacity: 0.55; } svg .p50 { fill: #2f6fdb; }
svg .tick { stroke: #1d2430; stroke-width: 2; } svg .max { stroke: #c0392b; stroke-width: 2; fill: none; }
svg .bar { fill: #2f9e6a; } svg .clip { stroke: #fff; stroke-width: 4; }
.scroll { overflow-x: auto; } table.speed th { white-space: normal; max-width: 9em; }
.header li { margin: 2px 0; } .evidence li { font-size: 0.85em; margin: 4px 0; }
#status { font-weight: 600; } a.ev { font-size: 0.75em; }
</style>
</head>
<body>
<h1>dlock comparison report</h1>
<ul class="header">{{range .Header}}<li>{{.}}</li>{{end}}</ul>
<p id="status">{{if .Surprises}}{{.Surprises}} cell(s) differ from what their backend declares.{{else}}Every cell is what its backend declares.{{end}}</p>
{{range .Matrices}}
<h2>{{.Title}}</h2>
<div class="scroll"><table class="matrix">
<thead><tr><th class="backend">backend</th>{{range .Cols}}<th class="col">{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr><td class="backend">{{.Backend}}</td>{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}{{range .Links}} <a class="ev" href="{{.Href}}">{{.Text}}</a>{{end}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{end}}
{{if .Matrices}}<p class="legend">{{range .Legend}}<span class="{{.Kind}}">{{.Text}}</span>{{end}}</p>
<p>In a cell: v1 opens porcupine's visualization of a violated trial's history (of the model that rejected it, or, for a violation no model rejects — a time bound or a liveness claim missed, a wrong answer — its holds with the failed calls and the violation on the time line); h1, h2 the recorded histories (JSON lines: each client's calls and what they returned, the resource's decisions, the faults, on one clock).</p>{{end}}
{{with .Speed}}
<h2>Speed</h2>
<div class="scroll"><table class="speed">
<thead><tr><th class="backend">backend</th>{{range .Columns}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr><td class="backend">{{.Backend}}</td>{{range .Values}}<td>{{.}}</td>{{end}}</tr>
{{end}}</tbody>
</table></div>
{{range .Notes}}<p>{{.}}</p>{{end}}
{{end}}
{{if .Latency}}<h2>Latency distribution: uncontended acquire + release</h2>
<p>Bar: p50 to p99; dot: p50; tick: p90; cross: the slowest. Log scale.</p>
{{.Latency}}{{end}}
{{if .Handoffs}}<h2>Hand-offs per second under contention</h2>
{{.Handoffs}}{{end}}
{{if .ScalingRate}}<h2>More waiters on one key: hand-offs per second</h2>
{{.ScalingRate}}{{end}}
{{if .ScalingRequests}}<h2>More waiters on one key: store requests per hand-off</h2>
<p>Flat is good: a backend that wakes every waiter on each release (a thundering herd) grows with the waiters.</p>
{{.ScalingRequests}}{{end}}
{{with .Speed}}{{if .Targets}}<h2>Speed targets</h2>
<table class="speed"><thead><tr><th>target</th><th>measured (median)</th><th>each repetition</th><th>limit</th><th>met</th></tr></thead>
<tbody>{{range .Targets}}<tr><td>{{.Claim}}</td><td>{{if .Missing}}not measured ({{.Missing}}){{else}}{{printf "%.2f" .Value}}{{end}}</td><td>{{range $i, $v := .Values}}{{if $i}}, {{end}}{{printf "%.2f" $v}}{{end}}</td><td>{{if .AtMost}}≤{{else}}≥{{end}} {{printf "%.2f" .Limit}}</td><td>{{if .Met}}yes{{else}}no{{end}}</td></tr>
{{end}}</tbody></table>{{end}}{{end}}
{{if .Evidence}}<h2>Evidence and notes</h2>
<ul class="evidence">{{range .Evidence}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Failures}}<h2>Failed tests</h2>
<ul>{{range .Failures}}<li>{{.}}</li>{{end}}</ul>{{end}}
<script>
(function () {
  var cells = document.querySelectorAll("table.matrix td[title]");
  var surprises = document.querySelectorAll("table.matrix td.surprise").length;
  document.title = "dlock comparison report: " + cells.length + " cells, " + surprises + " surprises";
  document.body.setAttribute("data-rendered", "ok");
})();
</script>
</body>
</html>
`))

// barValue prints v with no decimals from 10 up, one below.
func barValue(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
