package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/report"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/lab/bench"
)

// runBench measures the chosen backends and peers in this process (internal/bench,
// against servers it starts) and returns the speed part of the report. d is the
// length of each contended and many-keys measurement (0: the benchmarks' default);
// trials bounds the crash measurement's trials. Failed measurements are notes of
// the speed table; rows skipped for a missing server are notes too, and an error
// under DLOCK_REQUIRE_SERVERS=1.
func runBench(ctx context.Context, chosen []target, d time.Duration, trials, repeat int, maxLoad float64, force bool, prog *progress) (*report.Speed, error) {
	prog.start("benchmarks")
	defer servers.Shutdown()
	// A busy machine does not fail the main job: after waiting for it the benchmarks
	// run anyway, and the report says they are not quiet (TestDocs refuses such a
	// report as the committed one).
	cfg := bench.Config{Duration: d, CrashTrials: min(trials, bench.DefaultConfig.CrashTrials), MaxLoad: maxLoad, Force: force, ForceAfterWait: true, Repeat: repeat}
	for _, t := range chosen {
		cfg.Targets = append(cfg.Targets, t.Bench...)
	}
	res, err := bench.Run(ctx, cfg, func(line string) { prog.line("benchmarks", line) })
	if res == nil || errors.Is(err, bench.ErrBusy) {
		return nil, err
	}
	speed := speedOf(res)
	var problems []string
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, r := range res.Rows {
		if r.Skipped != "" {
			if servers.RequireServers() {
				problems = append(problems, r.Name+": "+r.Skipped)
			}
			speed.Notes = append(speed.Notes, fmt.Sprintf("%s: skipped: %s", r.Name, r.Skipped))
		}
		// A failed measurement is a finding, not a failure of the run: the classic
		// SETNX variants, for one, lose locks under contention.
		for _, e := range r.Errors {
			speed.Notes = append(speed.Notes, fmt.Sprintf("%s: measurement failed: %s", r.Name, e))
		}
	}
	if len(problems) > 0 {
		return speed, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return speed, nil
}

// speedOf turns benchmark results into the report's speed table and chart data.
func speedOf(res *bench.Results) *report.Speed {
	c := res.Config
	s := &report.Speed{Columns: []string{"kind", "uncontended p50", "p99", "× raw round trips",
		fmt.Sprintf("hand-offs/s (%d clients)", c.Clients), "longest wait", "longest wait (rounds passed)", "Jain fairness",
		fmt.Sprintf("many keys cycles/s (%d clients)", c.ManyClients), "lock freed after a crash (p50)", "allocs/cycle",
		"election: leader replaced after a crash (p50)", "4 keys at once vs 4 leases (p50)"}}
	s.Columns = append(s.Columns, primitiveColumns()...)
	dash := func(ok bool, f func() string) string {
		if !ok {
			return "–"
		}
		return f()
	}
	for _, r := range res.Rows {
		if r.Skipped != "" {
			row := make([]string, len(s.Columns))
			row[0], row[1] = string(r.Kind), "skipped"
			s.Rows = append(s.Rows, report.SpeedRow{Backend: r.Name, Values: row})
			continue
		}
		u, k, m, x, a, el, mk := r.Uncontended, r.Contended, r.ManyKeys, r.Crash, r.Allocs, r.Election, r.MultiKey
		s.Rows = append(s.Rows, report.SpeedRow{Backend: r.Name, Values: []string{
			string(r.Kind),
			dash(u != nil, func() string { return roundDur(u.P50) }),
			dash(u != nil, func() string { return roundDur(u.P99) }),
			dash(r.RawRatio > 0, func() string { return fmt.Sprintf("%.2f", r.RawRatio) }),
			dash(k != nil, func() string { return fmt.Sprintf("%.0f", k.TransferRate) }),
			dash(k != nil, func() string { return roundDur(k.Wait.Max) }),
			dash(k != nil, func() string { return fmt.Sprintf("%.1f", k.MaxRounds()) }),
			dash(k != nil, func() string { return fmt.Sprintf("%.3f", k.Jain) }),
			dash(m != nil, func() string { return fmt.Sprintf("%.0f", m.Rate) }),
			dash(x != nil, func() string { return fmt.Sprintf("%s (%s)", roundDur(x.P50), x.Timeout) }),
			dash(a != nil, func() string { return fmt.Sprintf("%.0f", a.PerCycle) }),
			dash(el != nil, func() string { return fmt.Sprintf("%s (%s)", roundDur(el.P50), el.Timeout) }),
			dash(mk != nil, func() string {
				return fmt.Sprintf("%s vs %s (%.2f×)", roundDur(mk.Set.P50), roundDur(mk.Singles.P50), mk.Ratio)
			}),
		}})
		s.Rows[len(s.Rows)-1].Values = append(s.Rows[len(s.Rows)-1].Values, primitiveValues(r)...)
		if u != nil {
			s.Latency = append(s.Latency, report.Latency{Backend: r.Name, N: u.N, P50: u.P50, P99: u.P99, Max: u.Max, Mean: u.Mean})
		}
		if k != nil && r.Kind != bench.Raw {
			s.Handoffs = append(s.Handoffs, report.Rate{Backend: r.Name, Clients: k.Clients, PerSecond: k.TransferRate})
		}
		scaled := func(name string, sc *bench.Scaling) {
			if sc == nil {
				return
			}
			for _, p := range sc.Points {
				s.Scaling = append(s.Scaling, report.ScalePoint{Backend: name, Waiters: p.Waiters, Handoffs: p.TransferRate, PerHandoff: p.PerHandoff})
			}
		}
		scaled(r.Name, r.Scaling)
		for _, p := range r.PrimScaling {
			scaled(r.Name+" "+p.Primitive, p.Scaling)
		}
	}
	for _, ch := range res.Checks {
		s.Targets = append(s.Targets, report.Target{Claim: ch.Claim, Value: ch.Value, Values: ch.Values, Limit: ch.Limit, AtMost: ch.AtMost, Met: ch.Met, Missing: ch.Missing})
	}
	s.Load = &report.Load{Before: res.Load.Before, After: res.Load.After, Limit: res.Load.Limit, Forced: res.Load.Forced, Quiet: res.Load.Quiet()}
	s.Notes = append(s.Notes, fmt.Sprintf("Benchmarks: %s, %d CPUs (%s), load %s → %s; each contended and many-keys measurement ran %v; "+
		"the uncontended, contended and scaling measurements ran %d times, each row shows its median repetition (scaling: the repetition whose hand-off rate ratio, most waiters ÷ fewest, is the median); "+
		"hand-offs count the grants to another client than the previous holder (a client that takes the lock straight back is not counted); "+
		"the longest wait in rounds passed is the most grants to other clients during one wait, over the clients less one (a fair queue passes a waiter one round; stalls of the machine, which lengthen every wait in time, pass no one). "+
		"Absolute times depend on the machine and its load: compare ratios within this run only.",
		res.Started.Format(time.RFC3339), res.Machine.CPUs, res.Machine.CPU, res.Machine.LoadBefore, res.Machine.LoadAfter, c.Duration, c.Repeat),
		res.Load.Sentence())
	return s
}

// roundDur prints d with about three significant digits.
func roundDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	case d >= time.Microsecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}
