package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxLoad is the load average (over one minute) above which a run refuses to
// start unless forced: on the 2-core machines the project measures on, a load of 2
// moves the ratios by a third.
const DefaultMaxLoad = 1.5

// ErrBusy is returned when the machine's load average stays at or above the limit
// (Config.MaxLoad) for the whole of Config.QuietWait and the run is not forced:
// results taken on a busy machine are not worth committing.
var ErrBusy = errors.New("bench: the machine is busy")

// Load is the load average before and after a run, and the limit it was held to.
type Load struct {
	Before, After string  // the first three fields of /proc/loadavg
	Limit         float64 // the one-minute load the run had to start below
	// Forced: the run started at or above the limit because it was told to. Its
	// results are not quiet; the project's committed results never are forced.
	Forced bool `json:",omitempty"`
	// Waited is how long the run waited for the load to come down.
	Waited time.Duration `json:",omitempty"`
}

// Quiet reports whether the run started below its limit.
func (l Load) Quiet() bool {
	v, err := load1(l.Before)
	return err == nil && !l.Forced && v < l.Limit
}

// waitQuiet waits up to wait for the one-minute load average to drop below limit,
// polling every few seconds (the load decays over about a minute once the machine
// is idle). With force it does not wait: a run above the limit goes ahead at once,
// marked Forced; with forceAfterWait it does so after waiting. It returns the Load
// so far; ErrBusy when the load stayed high and neither is set; ctx's error when ctx
// ends. Without /proc/loadavg (not Linux) the load is unknown and the run goes
// ahead, marked Forced.
func waitQuiet(ctx context.Context, limit float64, wait time.Duration, force, forceAfterWait bool, progress func(string)) (Load, error) {
	l := Load{Limit: limit}
	start := time.Now()
	for {
		l.Before = loadavg()
		v, err := load1(l.Before)
		if err != nil {
			l.Forced = true
			progress(fmt.Sprintf("load average unknown (%v): going ahead, the results are marked not quiet", err))
			return l, nil
		}
		if v < limit {
			l.Waited = time.Since(start).Round(time.Second)
			progress(fmt.Sprintf("load average %s (below %.2f): measuring", l.Before, limit))
			return l, nil
		}
		if force || time.Since(start) >= wait {
			if force || forceAfterWait {
				l.Forced = true
				progress(fmt.Sprintf("load average %s (at or above %.2f): measuring anyway (forced); the results are not quiet", l.Before, limit))
				return l, nil
			}
			return l, fmt.Errorf("%w: load average %s, at or above %.2f after waiting %v; stop what else runs, or force the run (its results are then marked not quiet)",
				ErrBusy, l.Before, limit, time.Since(start).Round(time.Second))
		}
		progress(fmt.Sprintf("load average %s (at or above %.2f): waiting for the machine to quiet down", l.Before, limit))
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(min(5*time.Second, max(wait-time.Since(start), 0))):
		}
	}
}

// load1 is the one-minute load average of a loadavg string.
func load1(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, errors.New("no /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// loadavg is the first three fields of /proc/loadavg ("" where there is none).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
