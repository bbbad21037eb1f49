package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// SoakConfig says how long and how hard Soak runs each target.
type SoakConfig struct {
	Targets  []string      // as Config.Targets; empty: every backend (not the peers)
	Duration time.Duration // per target (default 60s)
	Clients  int           // clients per target (default 64)
	Keys     int           // keys they pick from at random (default 1000)
	TTL      time.Duration // lease TTL (default 10s)
	Window   time.Duration // the first and the last window compared (default 10s)
	// Elections makes the clients campaign in elections named like the keys (lead
	// 1ms, resign) instead of taking locks, and observe a random one now and then;
	// backends without elections are skipped.
	Elections bool `json:"elections,omitempty"`
}

// DefaultSoakConfig is the configuration of `dlock-lab soak` without flags.
var DefaultSoakConfig = SoakConfig{Duration: time.Minute, Clients: 64, Keys: 1000, TTL: 10 * time.Second, Window: 10 * time.Second}

// SoakRow is one target's soak.
type SoakRow struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
	Grants   int64         `json:"grants"`
	// Violations: a holder entered a key's critical section while another was
	// inside; Stale: a holder's token was lower than one the key's resource had
	// seen (refused, as a fenced resource does). Both must be 0.
	Violations int64  `json:"violations"`
	Stale      int64  `json:"stale"`
	Errors     int64  `json:"errors"`
	FirstErr   string `json:"first_error,omitempty"`
	// Goroutines, Conns (open sockets of the process) and HeapMB averaged over the
	// first and the last window.
	Goroutines, Conns, HeapMB [2]float64
	// StoreKeys is how many keys the store kept before the run and after it, once
	// a TTL had passed (Redis: DBSIZE, summed over the masters; the in-process
	// Store: its lock entries and election records); -1 where not measured. What
	// may stay is one counter per name (a lock's or an election's fencing
	// counter): at most Keys more.
	StoreKeys [2]int64 `json:"store_keys"`
	Flat      bool     `json:"flat"`
	Skipped   string   `json:"skipped,omitempty"`
}

// SoakResults is a whole soak run.
type SoakResults struct {
	Machine Machine       `json:"machine"`
	Config  SoakConfig    `json:"config"`
	Rows    []SoakRow     `json:"rows"`
	Started time.Time     `json:"started"`
	Took    time.Duration `json:"took_ns"`
}

// Soak runs every selected backend for cfg.Duration: cfg.Clients clients, each in a
// loop taking a random one of cfg.Keys keys, entering the key's fenced resource with
// its token, working 1ms, leaving and releasing. It samples the process's
// goroutines, open sockets and live heap every second (more often for short windows)
// and compares the second window (the first one warms pools up) with the last: a leak shows as growth. The servers are started as for Run.
func Soak(ctx context.Context, cfg SoakConfig, progress func(string)) (*SoakResults, error) {
	d := DefaultSoakConfig
	if cfg.Duration <= 0 {
		cfg.Duration = d.Duration
	}
	if cfg.Clients <= 0 {
		cfg.Clients = d.Clients
	}
	if cfg.Keys <= 0 {
		cfg.Keys = d.Keys
	}
	if cfg.TTL <= 0 {
		cfg.TTL = d.TTL
	}
	if cfg.Window <= 0 {
		cfg.Window = min(d.Window, cfg.Duration/4)
	}
	targets, err := Select(cfg.Targets)
	if err != nil {
		return nil, err
	}
	if len(cfg.Targets) == 0 {
		var bs []Target
		for _, t := range targets {
			if t.Kind == Backend {
				bs = append(bs, t)
			}
		}
		targets = bs
	}
	res := &SoakResults{Machine: machine(), Config: cfg, Started: time.Now()}
	e := newEnv()
	defer e.close()
	for _, t := range targets {
		if ctx.Err() != nil {
			break
		}
		e.start(ctx, t.Store)
		if err := e.missing[t.Store]; err != nil {
			res.Rows = append(res.Rows, SoakRow{Name: t.Name, Skipped: err.Error()})
			continue
		}
		what := "keys"
		if cfg.Elections {
			what = "elections"
		}
		progress(fmt.Sprintf("soak %s: %d clients × %d %s for %v", t.Name, cfg.Clients, cfg.Keys, what, cfg.Duration))
		row, err := soakOne(ctx, e.ep, t, cfg)
		if err != nil {
			row = SoakRow{Name: t.Name, Skipped: err.Error()}
		}
		res.Rows = append(res.Rows, row)
	}
	res.Took = time.Since(res.Started)
	res.Machine.LoadAfter = loadavg()
	return res, nil
}

// fence is one key's protected resource: who is inside, and the highest token seen.
type fence struct {
	mu     sync.Mutex
	inside int
	max    uint64
}

func soakOne(ctx context.Context, ep Endpoints, t Target, cfg SoakConfig) (SoakRow, error) {
	row := SoakRow{Name: t.Name}
	ls, err := openN(ctx, t, ep, cfg.TTL, cfg.Clients)
	if err != nil {
		return row, err
	}
	defer closeAll(ls)
	prefix := key(ep, t.Name, "soak")
	// take takes name i: a lock, or a term of an election.
	take := func(ctx context.Context, l dlock.Locker, i int) (dlock.Lease, error) {
		return l.Acquire(ctx, fmt.Sprint(prefix, "/", i), dlock.WithTTL(cfg.TTL))
	}
	if cfg.Elections {
		if _, err := dlock.NewElection(ls[0], prefix); err != nil {
			return row, err // no elections on this backend
		}
		take = func(ctx context.Context, l dlock.Locker, i int) (dlock.Lease, error) {
			e, err := dlock.NewElection(l, fmt.Sprint(prefix, "/", i))
			if err != nil {
				return nil, err
			}
			if rand.IntN(10) == 0 { // now and then, observe a name (maybe one nobody campaigns in)
				octx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
				o, err := dlock.NewElection(l, fmt.Sprint(prefix, "/", rand.IntN(2*cfg.Keys)))
				if err == nil {
					for range o.Observe(octx) {
					}
				}
				cancel()
			}
			return e.Campaign(ctx, "soak", dlock.WithTTL(cfg.TTL))
		}
	}
	row.StoreKeys[0] = storeKeys(ctx, ep, t.Store)
	fences := make([]fence, cfg.Keys)
	var grants, violations, stale, errs atomic.Int64
	var firstErr atomic.Value
	run, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for run.Err() == nil {
				i := rand.IntN(cfg.Keys)
				actx, cancel := context.WithTimeout(run, cfg.TTL)
				lease, err := take(actx, l, i)
				cancel()
				if err != nil {
					if run.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				grants.Add(1)
				f := &fences[i]
				f.mu.Lock()
				if f.inside > 0 {
					violations.Add(1)
				}
				if tok := lease.Token(); tok != 0 && tok <= f.max {
					stale.Add(1)
				}
				f.max = max(f.max, lease.Token())
				f.inside++
				f.mu.Unlock()
				time.Sleep(time.Millisecond) // the work done under the lock
				f.mu.Lock()
				f.inside--
				f.mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := lease.Release(rctx); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				rcancel()
			}
		})
	}
	type sample struct {
		at                      time.Duration
		goroutines, conns, heap float64
	}
	var samples []sample
	// The live heap as the last garbage collection found it: unlike the heap in use
	// at an instant, it does not swing with the allocation cycle.
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	start := time.Now()
	tick := time.NewTicker(min(time.Second, cfg.Window/5))
sampling:
	for {
		select {
		case <-run.Done():
			break sampling
		case <-tick.C:
			metrics.Read(live)
			samples = append(samples, sample{time.Since(start), float64(runtime.NumGoroutine()), float64(openSockets()), float64(live[0].Value.Uint64()) / (1 << 20)})
		}
	}
	tick.Stop()
	wg.Wait()
	row.Duration = time.Since(start)
	row.Grants, row.Violations, row.Stale, row.Errors = grants.Load(), violations.Load(), stale.Load(), errs.Load()
	if e, ok := firstErr.Load().(string); ok {
		row.FirstErr = e
	}
	avg := func(from, to time.Duration, f func(sample) float64) float64 {
		sum, n := 0.0, 0
		for _, s := range samples {
			if s.at >= from && s.at < to {
				sum += f(s)
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	w, end := cfg.Window, row.Duration
	for i, m := range []struct {
		dst *[2]float64
		f   func(sample) float64
	}{{&row.Goroutines, func(s sample) float64 { return s.goroutines }},
		{&row.Conns, func(s sample) float64 { return s.conns }},
		{&row.HeapMB, func(s sample) float64 { return s.heap }}} {
		_ = i
		m.dst[0], m.dst[1] = avg(w, 2*w, m.f), avg(end-w, end, m.f) // the very first window warms pools up
	}
	// Flat: the last window is within 10% (plus a little) of the first.
	flat := func(v [2]float64, slack float64) bool { return v[1] <= v[0]*1.1+slack }
	row.Flat = flat(row.Goroutines, 8) && flat(row.Conns, 4) && flat(row.HeapMB, 8)
	row.StoreKeys[1] = -1
	if row.StoreKeys[0] >= 0 && ctx.Err() == nil {
		// What expires goes within a TTL of the last grant (and memlock reaps on
		// the next grant a second later).
		select {
		case <-time.After(cfg.TTL + time.Second):
		case <-ctx.Done():
		}
		if ls, err := ls[0].TryAcquire(ctx, prefix+"/reap", dlock.WithTTL(cfg.TTL)); err == nil {
			_ = ls.Release(ctx)
		}
		row.StoreKeys[1] = storeKeys(ctx, ep, t.Store)
		row.Flat = row.Flat && row.StoreKeys[1] >= 0 && row.StoreKeys[1] <= row.StoreKeys[0]+int64(cfg.Keys)+1
	}
	return row, nil
}

// storeKeys counts the keys the store of s keeps: DBSIZE of the Redis (summed over
// the masters), the lock entries and election records of the in-process Store; -1
// for the other stores, or when the count fails.
func storeKeys(ctx context.Context, ep Endpoints, s Store) int64 {
	switch s {
	case Memory:
		return int64(ep.Mem.Size() + ep.Mem.Elections())
	case Redis, Redis5:
		var n int64
		for _, a := range ep.addrs(s) {
			c := redis.NewClient(&redis.Options{Addr: a})
			k, err := c.DBSize(ctx).Result()
			c.Close()
			if err != nil {
				return -1
			}
			n += k
		}
		return n
	}
	return -1
}

// openSockets counts this process's open sockets.
func openSockets() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range entries {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// Markdown renders the soak as a table.
func (r *SoakResults) Markdown() string {
	var b strings.Builder
	what := "keys"
	if r.Config.Elections {
		what = "elections (campaign, lead 1ms, resign; a tenth of the turns observe a name for 10ms)"
	}
	fmt.Fprintf(&b, "Soak: %d clients × %d %s per backend, %v each, lease TTL %v; first and last %v compared.\n",
		r.Config.Clients, r.Config.Keys, what, r.Config.Duration, r.Config.TTL, r.Config.Window)
	fmt.Fprintf(&b, "Machine: %s; load average before %s, after %s.\n\n", r.Machine.CPU, r.Machine.LoadBefore, r.Machine.LoadAfter)
	b.WriteString("| backend | grants | overlaps | stale tokens | errors | goroutines first → last | sockets first → last | heap MB first → last | store keys before → after | flat |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range r.Rows {
		if row.Skipped != "" {
			fmt.Fprintf(&b, "| %s | skipped: %s |  |  |  |  |  |  |  |  |\n", row.Name, mdEscape(row.Skipped))
			continue
		}
		flat := "yes"
		if !row.Flat {
			flat = "**no**"
		}
		keys := "–"
		if row.StoreKeys[0] >= 0 {
			keys = fmt.Sprintf("%d → %d", row.StoreKeys[0], row.StoreKeys[1])
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.0f → %.0f | %.0f → %.0f | %.1f → %.1f | %s | %s |\n", row.Name, row.Grants,
			row.Violations, row.Stale, row.Errors, row.Goroutines[0], row.Goroutines[1], row.Conns[0], row.Conns[1],
			row.HeapMB[0], row.HeapMB[1], keys, flat)
	}
	for _, row := range r.Rows {
		if row.FirstErr != "" {
			fmt.Fprintf(&b, "\n%s: first error: %s", row.Name, mdEscape(row.FirstErr))
		}
	}
	b.WriteString("\n")
	return b.String()
}
