package docgen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/results"
	"github.com/dlock-go/dlock/spec"
)

// readmeRows are the backends of the README's table, in order, with what each is
// for: the one column that is judgement, not measurement.
var readmeRows = []struct{ backend, url, useFor string }{
	{"etcd", "etcd://", "correctness, with fencing; fair queues"},
	{"zk", "zk://", "correctness, with fencing; fair queues"},
	{"mysql", "mysql://", "you already run MySQL/MariaDB; fencing"},
	{"redis", "redis://", "speed; correctness only with fencing, persistence and no failover"},
	{"redlock", "redlock://", "efficiency locks across independent Redis masters (no fencing)"},
	{"postgres", "postgres://", "you already run PostgreSQL; fencing; works through PgBouncer"},
	{"mysql+getlock", "mysql+getlock://", "simple exclusion held by a connection (no fencing)"},
	{"postgres+advisory", "postgres+advisory://", "exclusion held by a session (no fencing); not behind a transaction pooler"},
	{"redis+setnx", "redis+setnx://", "study only: the seeds' broken algorithms"},
	{"mem", "mem://", "tests, one process"},
}

// readmeCols are the fault columns: a title, and the scenarios whose cells it shows.
var readmeCols = []struct {
	title     string
	scenarios []spec.Scenario
}{
	{"fenced resource stops a paused holder", []spec.Scenario{spec.HolderPauseFenced}},
	{"crashed holder's lock frees", []spec.Scenario{spec.HolderCrash}},
	{"server restart", []spec.Scenario{spec.ServerRestart}},
	{"failover, node or leader loss", []spec.Scenario{spec.Failover, spec.FailoverFencing, spec.QuorumLoss, spec.ClockJumpBareMajority, spec.LeaderKill, spec.LeaderKillLease}},
	{"cut-off holder", []spec.Scenario{spec.Partition}},
	{"hung store", []spec.Scenario{spec.StoreHang}},
}

// readmeBackends renders the README's table: per backend (all its configurations:
// "redis" covers "redis (appendfsync always)"), the verdict of each scenario.
func readmeBackends(r *report.Report) (string, error) {
	var b strings.Builder
	b.WriteString("| backend | ")
	for _, c := range readmeCols {
		b.WriteString(c.title + " | ")
	}
	b.WriteString("use it for |\n|---|")
	b.WriteString(strings.Repeat("---|", len(readmeCols)+1) + "\n")
	for _, row := range readmeRows {
		fmt.Fprintf(&b, "| `%s` |", row.url)
		for _, col := range readmeCols {
			var parts []string
			for _, s := range col.scenarios {
				for _, c := range familyCells(r, row.backend, s) {
					parts = append(parts, fmt.Sprintf("%s `%s`%s", symbol(c), s, config(row.backend, c.Backend)))
				}
			}
			if len(parts) == 0 {
				parts = []string{"–"}
			}
			fmt.Fprintf(&b, " %s |", strings.Join(parts, "<br>"))
		}
		fmt.Fprintf(&b, " %s |\n", row.useFor)
	}
	b.WriteString("\n✅ held in every exercised trial · ⚠️ violated (a declared weakness, reproduced) · ⚠️? violated in some exercised trials, not others (a timing-dependent weakness, declared as such) · – not applicable or not run. The trials, evidence and figures of each cell are in the report (docs/tradeoffs.md).\n")
	return b.String(), nil
}

// familyCells returns the cells of scenario s of backend and its configurations
// that ran (not "not applicable"), in report order.
func familyCells(r *report.Report, backend string, s spec.Scenario) []results.Cell {
	var out []results.Cell
	seen := map[string]bool{}
	for _, c := range r.Cells {
		if c.Scenario != string(s) || c.Status == spec.NotApplicable || seen[c.Backend] {
			continue
		}
		if c.Backend == backend || strings.HasPrefix(c.Backend, backend+" (") || strings.HasPrefix(c.Backend, backend+" ") {
			seen[c.Backend] = true
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b results.Cell) int { return len(a.Backend) - len(b.Backend) })
	return out
}

func symbol(c results.Cell) string {
	switch {
	case c.Surprise():
		return "❌"
	case c.Status == spec.Held:
		return "✅"
	case c.Status == spec.Violated && c.Expected == spec.Sometimes && c.SomeTrials():
		return "⚠️?"
	case c.Status == spec.Violated:
		return "⚠️"
	case c.Status == spec.Unavailable:
		return "⏸"
	}
	return "–"
}

// config names a configuration of backend: "" for the backend itself, else what
// its name adds (" (appendfsync always)").
func config(backend, name string) string {
	if name == backend {
		return ""
	}
	return " " + strings.TrimSpace(strings.TrimPrefix(name, backend))
}
