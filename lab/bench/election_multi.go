package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/measure"
)

// The measurements of the primitives beyond the mutex: an election's failover
// after its leader crashed (the crash measurement, run on candidates), and a set
// of keys taken at once against the same keys taken one by one.

// setSize is the number of keys of the multi-key measurement.
const setSize = 4

// MultiKey is the outcome of the multi-key measurement: AcquireAll+Release of
// setSize keys, against setSize Acquires then setSize Releases, interleaved round by
// round on one client.
type MultiKey struct {
	Set     measure.Latency
	Singles measure.Latency
	Ratio   float64 // Set p50 / Singles p50
}

// candidate is a Locker whose Acquire campaigns in the election named key.
type candidate struct{ dlock.Locker }

func (c candidate) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	e, err := dlock.NewElection(c.Locker, key)
	if err != nil {
		return nil, err
	}
	return e.Campaign(ctx, "bench", opts...)
}

// hasElection reports whether t's backend runs elections (a client is opened to see).
func hasElection(ctx context.Context, ep Endpoints, t Target, ttl time.Duration) (bool, error) {
	l, err := t.Open(ctx, ep, ttl)
	if err != nil {
		return false, err
	}
	defer l.Close()
	_, err = dlock.NewElection(l, "probe")
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	return err == nil, err
}

// electionFailover is the crash measurement on candidates: a leader whose links are
// cut, and the time until a waiting candidate leads.
func electionFailover(ctx context.Context, e *env, t Target, timeout time.Duration, trials int) (Crash, error) {
	c := t
	c.Name = t.Name + "/election"
	c.Open = func(ctx context.Context, ep Endpoints, d time.Duration) (dlock.Locker, error) {
		l, err := t.Open(ctx, ep, d)
		if err != nil {
			return nil, err
		}
		return candidate{l}, nil
	}
	return crash(ctx, e, c, timeout, trials)
}

// multiKey measures, on one client of t, rounds cycles of a set of setSize keys
// against the same number of single leases, interleaved.
func multiKey(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, warmup, rounds int) (MultiKey, error) {
	l, err := t.Open(ctx, ep, ttl)
	if err != nil {
		return MultiKey{}, err
	}
	defer l.Close()
	var set, singles []string
	for i := range setSize {
		set = append(set, key(ep, t.Name, fmt.Sprintf("ms%d", i)))
		singles = append(singles, key(ep, t.Name, fmt.Sprintf("m1%d", i)))
	}
	opt := dlock.WithTTL(ttl)
	lats, err := measure.Interleave(warmup, rounds,
		func() error {
			ls, err := dlock.TryAcquireAll(ctx, l, set, opt)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		},
		func() error {
			var held []dlock.Lease
			for _, k := range singles {
				ls, err := l.TryAcquire(ctx, k, opt)
				if err != nil {
					return err
				}
				held = append(held, ls)
			}
			for _, ls := range held {
				if err := ls.Release(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return MultiKey{}, err
	}
	m := MultiKey{Set: lats[0], Singles: lats[1]}
	if m.Singles.P50 > 0 {
		m.Ratio = float64(m.Set.P50) / float64(m.Singles.P50)
	}
	return m, nil
}

// electionMultiMarkdown renders the primitives' measurements as a table of their own
// ("" when none was made).
func electionMultiMarkdown(r *Results) string {
	var b strings.Builder
	for _, row := range r.Rows {
		el, mk := row.Election, row.MultiKey
		if el == nil && mk == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n| target | election: leader replaced after a crash p50 / max (freed by) | %d keys at once p50 | %d single leases p50 | ratio |\n|---|---|--:|--:|--:|\n", setSize, setSize)
		}
		cells := []string{mdEscape(row.Name), "–", "–", "–", "–"}
		if el != nil {
			cells[1] = fmt.Sprintf("%s / %s (%s)", dur(el.P50), dur(el.Max), el.Timeout)
		}
		if mk != nil {
			cells[2], cells[3], cells[4] = dur(mk.Set.P50), dur(mk.Singles.P50), fmt.Sprintf("%.2f", mk.Ratio)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	if b.Len() > 0 {
		fmt.Fprintf(&b, "\nElection = the crash measurement on candidates: a leader whose links are cut, and the time until a waiting candidate leads. "+
			"Multi-key = %d rounds, each an AcquireAll+Release of %d keys and %d Acquires then %d Releases on other keys, on one client.\n", r.Config.Rounds/4, setSize, setSize, setSize)
	}
	return b.String()
}
