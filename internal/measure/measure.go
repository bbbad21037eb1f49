// Package measure holds the measurements every benchmark of dlock makes — Go
// benchmarks in the backend packages and `dlock-lab bench` alike — so that numbers from
// different backends and peers mean the same thing.
package measure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

// Latency summarizes a set of durations.
type Latency struct {
	N                   int
	P50, P99, Mean, Max time.Duration
}

func (l Latency) String() string {
	return fmt.Sprintf("n=%d p50=%v p99=%v mean=%v max=%v", l.N, l.P50, l.P99, l.Mean, l.Max)
}

// Summarize computes percentiles (nearest rank) of samples; it sorts samples.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return samples[max(0, min(i, len(samples)-1))]
	}
	return Latency{N: len(samples), P50: rank(0.50), P99: rank(0.99), Mean: sum / time.Duration(len(samples)), Max: samples[len(samples)-1]}
}

// Measure runs f n times and summarizes how long each call took. It stops at the
// first error.
func Measure(n int, f func() error) (Latency, error) {
	samples := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := f(); err != nil {
			return Summarize(samples), err
		}
		samples = append(samples, time.Since(t0))
	}
	return Summarize(samples), nil
}

// Cycle acquires key on l (TryAcquire: the key must be free) and releases it: one
// uncontended acquire+release.
func Cycle(ctx context.Context, l dlock.Locker, key string, opts ...dlock.Option) error {
	return cycle(ctx, l.TryAcquire, key, opts)
}

// AcquireCycle acquires key on l with Acquire, the blocking form (the key should be
// free, so it is one attempt or, for queueing backends, one pass through the queue),
// and releases it.
func AcquireCycle(ctx context.Context, l dlock.Locker, key string, opts ...dlock.Option) error {
	return cycle(ctx, l.Acquire, key, opts)
}

// cycle takes key with acquire and releases it.
func cycle(ctx context.Context, acquire func(context.Context, string, ...dlock.Option) (dlock.Lease, error), key string, opts []dlock.Option) error {
	ls, err := acquire(ctx, key, opts...)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := ls.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// Interleave runs warmup+rounds rounds; each round calls every f once, in order, and
// times it. It returns one Latency per f over the rounds after the warm-up. Running
// the contenders in turn gives each the same machine and server conditions, which on
// a shared machine drift far more than the differences being measured. It stops at
// the first error, naming the index of the f that failed.
func Interleave(warmup, rounds int, fs ...func() error) ([]Latency, error) {
	samples := make([][]time.Duration, len(fs))
	for i := range samples {
		samples[i] = make([]time.Duration, 0, rounds)
	}
	summarize := func() []Latency {
		out := make([]Latency, len(fs))
		for i, s := range samples {
			out[i] = Summarize(s)
		}
		return out
	}
	for r := range warmup + rounds {
		for i, f := range fs {
			t0 := time.Now()
			if err := f(); err != nil {
				return summarize(), fmt.Errorf("contender %d, round %d: %w", i, r, err)
			}
			if r >= warmup {
				samples[i] = append(samples[i], time.Since(t0))
			}
		}
	}
	return summarize(), nil
}

// Allocs runs f n times and returns the heap allocations and bytes allocated per call.
// The counts are the whole process's (runtime.MemStats): whatever else runs meanwhile
// — a client library's background goroutines, a server embedded in the process —
// is counted too, so compare them with a baseline measured the same way.
func Allocs(n int, f func() error) (allocs, bytes float64, err error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := 0
	for ; done < n; done++ {
		if err = f(); err != nil {
			break
		}
	}
	runtime.ReadMemStats(&after)
	if done == 0 {
		return 0, 0, err
	}
	return float64(after.Mallocs-before.Mallocs) / float64(done), float64(after.TotalAlloc-before.TotalAlloc) / float64(done), err
}

// Uncontended measures n acquire+release cycles of one client on one key.
func Uncontended(ctx context.Context, l dlock.Locker, key string, n int, opts ...dlock.Option) (Latency, error) {
	return Measure(n, func() error { return Cycle(ctx, l, key, opts...) })
}

// Contention is the outcome of clients contending on one key.
type Contention struct {
	Clients  int
	Handoffs int           // grants in all
	Elapsed  time.Duration // measured time
	Rate     float64       // grants per second
	// Transfers counts the grants that went to another client than the one before:
	// hand-offs proper. A client that releases and at once takes the lock again
	// (barging past the waiters) adds a grant but no transfer.
	Transfers    int
	TransferRate float64 // transfers per second
	// Unavailable counts Acquire calls that failed with dlock.ErrUnavailable (the
	// backend could not decide, e.g. no Redlock quorum answered in time); the client
	// asked again.
	Unavailable int
	// Lost counts releases that found the lock no longer theirs (dlock.ErrNotHeld):
	// a lease lost while held — under contention, a backend's weakness showing.
	Lost int
	Wait Latency // time from asking to being granted
	// Jain is Jain's fairness index over the clients' grant counts: 1 when all got
	// the same number, 1/Clients when one got everything.
	Jain      float64
	PerClient []int
}

func (c Contention) String() string {
	return fmt.Sprintf("%d clients: %.1f grants/s (%d in %v), %.1f to another client/s, wait p50=%v max=%v (max/mean %.1f), Jain %.3f",
		c.Clients, c.Rate, c.Handoffs, c.Elapsed.Round(time.Millisecond), c.TransferRate, c.Wait.P50, c.Wait.Max, c.MaxOverMean(), c.Jain)
}

// MaxOverMean is the longest wait divided by the mean wait (0 without waits).
func (c Contention) MaxOverMean() float64 {
	if c.Wait.Mean == 0 {
		return 0
	}
	return float64(c.Wait.Max) / float64(c.Wait.Mean)
}

// Contend runs one goroutine per locker (one client each) that acquires key, holds
// it for hold, and releases it, over and over for d. Each Acquire waits as the
// backend waits (wake-ups, queues or backoff); one that fails with
// dlock.ErrUnavailable is counted and made again. It returns the first other error.
func Contend(ctx context.Context, lockers []dlock.Locker, key string, d, hold time.Duration, opts ...dlock.Option) (Contention, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		waits       []time.Duration
		counts      = make([]int, len(lockers))
		firstErr    error
		stop        atomic.Bool
		last        = -1 // the client granted last
		moves       int
		unavailable atomic.Int64
		lost        int
	)
	start := time.Now()
	deadline := start.Add(d)
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && time.Now().Before(deadline) {
				t0 := time.Now()
				ls, err := l.Acquire(ctx, key, opts...)
				if errors.Is(err, dlock.ErrUnavailable) && ctx.Err() == nil {
					unavailable.Add(1)
					continue
				}
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, fmt.Errorf("client %d: acquire: %w", i, err))
						mu.Unlock()
						cancel()
					}
					return
				}
				w := time.Since(t0)
				mu.Lock()
				if last != i {
					moves++
					last = i
				}
				mu.Unlock()
				if hold > 0 {
					time.Sleep(hold)
				}
				if time.Now().After(deadline) {
					stop.Store(true) // the next waiter is not counted; let them all go
				}
				err = ls.Release(context.WithoutCancel(ctx))
				mu.Lock()
				waits = append(waits, w)
				counts[i]++
				if errors.Is(err, dlock.ErrNotHeld) {
					lost++
					err = nil
				}
				if err != nil {
					firstErr = cmpErr(firstErr, fmt.Errorf("client %d: release: %w", i, err))
					cancel()
				}
				mu.Unlock()
			}
		}()
	}
	// Waiters still blocked when time is up are cancelled.
	t := time.AfterFunc(d, func() { stop.Store(true); cancel() })
	wg.Wait()
	t.Stop()
	elapsed := time.Since(start)
	c := Contention{Clients: len(lockers), Handoffs: len(waits), Elapsed: elapsed,
		Rate: float64(len(waits)) / elapsed.Seconds(), Wait: Summarize(waits), PerClient: counts, Jain: Jain(counts),
		Transfers: moves, TransferRate: float64(moves) / elapsed.Seconds(), Unavailable: int(unavailable.Load()), Lost: lost}
	return c, firstErr
}

func cmpErr(old, e error) error {
	if old != nil {
		return old
	}
	return e
}

// Jain returns Jain's fairness index of xs: (Σx)² / (n·Σx²).
func Jain(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Throughput is the outcome of many clients working on many keys.
type Throughput struct {
	Ops int
	// Unavailable counts cycles whose Acquire failed with dlock.ErrUnavailable; the
	// client went on with the next key.
	Unavailable int
	Elapsed     time.Duration
	Rate        float64 // acquire+release cycles per second
	Latency     Latency
}

func (t Throughput) String() string {
	return fmt.Sprintf("%.0f cycles/s (%d in %v), cycle p50=%v p99=%v, %d unavailable", t.Rate, t.Ops, t.Elapsed.Round(time.Millisecond), t.Latency.P50, t.Latency.P99, t.Unavailable)
}

// ManyKeys runs one goroutine per locker; goroutine i cycles (acquire+release)
// through keys, starting at a different offset, for d. Keys are prefix+"/"+n for
// n < keys. Collisions between goroutines on a key are waited out. A cycle whose
// Acquire fails with dlock.ErrUnavailable is counted, not timed; other errors stop
// the run and the first is returned.
func ManyKeys(ctx context.Context, lockers []dlock.Locker, prefix string, keys int, d time.Duration, opts ...dlock.Option) (Throughput, error) {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		samples     []time.Duration
		firstErr    error
		unavailable atomic.Int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for n := i * keys / max(len(lockers), 1); time.Now().Before(deadline); n++ {
				k := fmt.Sprintf("%s/%d", prefix, n%keys)
				t0 := time.Now()
				ls, err := l.Acquire(ctx, k, opts...)
				if errors.Is(err, dlock.ErrUnavailable) && ctx.Err() == nil {
					unavailable.Add(1)
					continue
				}
				if err == nil {
					err = ls.Release(ctx)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, fmt.Errorf("client %d key %s: %w", i, k, err))
					mu.Unlock()
					cancel()
					break
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			samples = append(samples, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	return Throughput{Ops: len(samples), Elapsed: elapsed, Rate: float64(len(samples)) / elapsed.Seconds(), Latency: Summarize(samples),
		Unavailable: int(unavailable.Load())}, firstErr
}
