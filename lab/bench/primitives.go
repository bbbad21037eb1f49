package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/measure"
)

// The speed of the primitives beyond the mutex, per backend that has them:
//   - a semaphore permit's acquire+release p50 against the same backend's mutex,
//     interleaved round by round (the ratio: target ≤ 1.3×);
//   - contended permits per second: PrimClients clients on one semaphore of
//     PrimPermits permits, each acquiring, releasing at once and asking again;
//   - shared leases per second: PrimReaders clients acquiring and releasing shared
//     leases of one read-write lock.

// MPrimitives is the measurement of the primitives (skip it with Config.Skip).
const MPrimitives Measurement = "primitives"

func init() { Measurements = append(Measurements, MPrimitives) }

// The sizes of the primitives' measurement.
const (
	PrimClients = 16
	PrimPermits = 4
	PrimReaders = 8
)

// Primitives is what MPrimitives measured for one target. A part the backend has
// no primitive for is nil.
type Primitives struct {
	Mutex, Semaphore *measure.Latency // interleaved uncontended acquire+release
	Ratio            float64          // Semaphore.P50 / Mutex.P50
	PermitsPerSec    float64          // PrimClients clients, PrimPermits permits
	SharedPerSec     float64          // PrimReaders readers
	ReadLock         bool             // the backend has read-write locks
}

func (p *Primitives) String() string {
	var parts []string
	if p.Semaphore != nil {
		parts = append(parts, fmt.Sprintf("semaphore p50 %v vs mutex %v (%.2f×), %.0f permits/s (%d clients, %d permits)",
			p.Semaphore.P50, p.Mutex.P50, p.Ratio, p.PermitsPerSec, PrimClients, PrimPermits))
	}
	if p.ReadLock {
		parts = append(parts, fmt.Sprintf("%.0f shared leases/s (%d readers)", p.SharedPerSec, PrimReaders))
	}
	if len(parts) == 0 {
		return "no primitives"
	}
	return strings.Join(parts, "; ")
}

// primitives measures t's primitives; errors.ErrUnsupported when it has none.
func primitives(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, warmup, rounds int, d time.Duration) (*Primitives, error) {
	probe, err := t.Open(ctx, ep, ttl)
	if err != nil {
		return nil, err
	}
	_, semErr := dlock.NewSemaphore(probe, "probe", PrimPermits)
	_, rwErr := dlock.NewRWMutex(probe, "probe")
	if semErr != nil && rwErr != nil {
		_ = probe.Close()
		return nil, fmt.Errorf("%s: %w", t.Name, errors.ErrUnsupported)
	}
	p := &Primitives{ReadLock: rwErr == nil}
	opt := dlock.WithTTL(ttl)
	if semErr == nil {
		mk, sk := key(ep, t.Name, "pm"), key(ep, t.Name, "ps")
		sem, _ := dlock.NewSemaphore(probe, sk, PrimPermits)
		lats, err := measure.Interleave(warmup, rounds,
			func() error { return measure.AcquireCycle(ctx, probe, mk, opt) },
			func() error { return cycle(ctx, sem.Acquire, opt) })
		if err != nil {
			_ = probe.Close()
			return nil, fmt.Errorf("uncontended: %w", err)
		}
		p.Mutex, p.Semaphore = &lats[0], &lats[1]
		if lats[0].P50 > 0 {
			p.Ratio = float64(lats[1].P50) / float64(lats[0].P50)
		}
	}
	_ = probe.Close()
	if semErr == nil {
		k := key(ep, t.Name, "pc")
		p.PermitsPerSec, err = throughput(ctx, ep, t, ttl, PrimClients, d, func(l dlock.Locker) (func() error, error) {
			sem, err := dlock.NewSemaphore(l, k, PrimPermits)
			return func() error { return cycle(ctx, sem.Acquire, opt) }, err
		})
		if err != nil {
			return p, fmt.Errorf("contended permits: %w", err)
		}
	}
	if rwErr == nil {
		k := key(ep, t.Name, "pr")
		p.SharedPerSec, err = throughput(ctx, ep, t, ttl, PrimReaders, d, func(l dlock.Locker) (func() error, error) {
			m, err := dlock.NewRWMutex(l, k)
			return func() error { return cycle(ctx, m.AcquireShared, opt) }, err
		})
		if err != nil {
			return p, fmt.Errorf("shared leases: %w", err)
		}
	}
	return p, nil
}

// cycle acquires with acquire and releases at once.
func cycle(ctx context.Context, acquire func(context.Context, ...dlock.Option) (dlock.Lease, error), opts ...dlock.Option) error {
	ls, err := acquire(ctx, opts...)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if err := ls.Release(ctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// throughput runs n clients of t, each repeating the cycle newCycle gives it for d, and
// returns the cycles per second.
func throughput(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, n int, d time.Duration, newCycle func(l dlock.Locker) (func() error, error)) (float64, error) {
	ls, err := openN(ctx, t, ep, ttl, n)
	if err != nil {
		return 0, err
	}
	defer closeAll(ls)
	cycles := make([]func() error, n)
	for i, l := range ls {
		if cycles[i], err = newCycle(l); err != nil {
			return 0, err
		}
	}
	var done atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for _, c := range cycles {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := c(); err != nil {
					mu.Lock()
					first = cmpFirst(first, err)
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), first
}

func cmpFirst(old, err error) error {
	if old != nil {
		return old
	}
	return err
}

// primitivesMarkdown renders the primitives' table ("" when nothing was measured).
func (r *Results) primitivesMarkdown() string {
	var b strings.Builder
	for _, row := range r.Rows {
		p := row.Primitives
		if p == nil {
			continue
		}
		if b.Len() == 0 {
			fmt.Fprintf(&b, "\n| target | mutex p50 | semaphore p50 | semaphore ÷ mutex (target ≤ 1.3) | permits/s (%d clients, %d permits) | shared leases/s (%d readers) |\n|---|--:|--:|--:|--:|--:|\n",
				PrimClients, PrimPermits, PrimReaders)
		}
		cells := []string{mdEscape(row.Name), "–", "–", "–", "–", "–"}
		if p.Semaphore != nil {
			cells[1], cells[2], cells[3], cells[4] = dur(p.Mutex.P50), dur(p.Semaphore.P50), fmt.Sprintf("%.2f", p.Ratio), fmt.Sprintf("%.0f", p.PermitsPerSec)
		}
		if p.ReadLock {
			cells[5] = fmt.Sprintf("%.0f", p.SharedPerSec)
		}
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	return b.String()
}
