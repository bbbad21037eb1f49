package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

// The scaling of the primitives beyond the mutex: the contended measurement of
// scaling.go (hand-offs/s, store requests per hand-off, with few and many clients)
// run on one semaphore of PrimPermits permits, on one read-write lock whose first
// PrimWriters clients take exclusive leases and the others shared ones, and on one
// election whose candidates each resign as soon as they lead.

// MPrimScaling is the measurement of the primitives' scaling (skip it with
// Config.Skip).
const MPrimScaling Measurement = "primscaling"

func init() { Measurements = append(Measurements, MPrimScaling) }

// PrimWriters is the number of writers among the read-write lock's clients.
const PrimWriters = 4

// primWaiters returns the numbers of clients of the primitives' scaling: the fewest and
// the most of the mutex's (Config.Waiters).
func primWaiters(waiters []int) []int {
	if len(waiters) < 2 {
		return waiters
	}
	return []int{waiters[0], waiters[len(waiters)-1]}
}

// PrimScale is one primitive's scaling.
type PrimScale struct {
	// Primitive names it as the report shows it: "semaphore(4)", "rwlock(4 writers)",
	// "election".
	Primitive string
	*Scaling
}

// primitiveLockers are, per primitive, a Locker whose Acquire takes that primitive
// named by the key (nil when t's backend has none of it); the argument is the
// client's place in the order the clients are opened.
func primitiveLockers(ctx context.Context, ep Endpoints, t Target, ttl time.Duration) ([]PrimScale, []func(dlock.Locker, int) dlock.Locker, error) {
	probe, err := t.Open(ctx, ep, ttl)
	if err != nil {
		return nil, nil, err
	}
	defer probe.Close()
	var names []PrimScale
	var wraps []func(dlock.Locker, int) dlock.Locker
	if _, err := dlock.NewSemaphore(probe, "probe", PrimPermits); err == nil {
		names = append(names, PrimScale{Primitive: fmt.Sprintf("semaphore(%d)", PrimPermits)})
		wraps = append(wraps, func(l dlock.Locker, _ int) dlock.Locker { return permitTaker{l} })
	}
	if _, err := dlock.NewRWMutex(probe, "probe"); err == nil {
		names = append(names, PrimScale{Primitive: fmt.Sprintf("rwlock(%d writers)", PrimWriters)})
		wraps = append(wraps, func(l dlock.Locker, i int) dlock.Locker { return rwTaker{l, i < PrimWriters} })
	}
	if _, err := dlock.NewElection(probe, "probe"); err == nil {
		names = append(names, PrimScale{Primitive: "election"})
		wraps = append(wraps, func(l dlock.Locker, _ int) dlock.Locker { return candidate{l} })
	}
	return names, wraps, nil
}

// primScaling measures the scaling of each primitive t's backend has, with each
// number of clients in waiters, reps times (repeatScaling); errors.ErrUnsupported
// when it has none.
func primScaling(ctx context.Context, e *env, t Target, ttl time.Duration, waiters []int, d time.Duration, reps int) ([]PrimScale, error) {
	out, wraps, err := primitiveLockers(ctx, e.ep, t, ttl)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: %w", t.Name, errors.ErrUnsupported)
	}
	for i := range out {
		var err error
		out[i].Scaling, err = repeatScaling(reps, func() (*Scaling, error) {
			run := &Scaling{}
			for _, n := range waiters {
				p := t
				p.Name = t.Name + "/" + out[i].Primitive
				var opened atomic.Int64 // each point opens its clients afresh
				p.Open = func(ctx context.Context, ep Endpoints, ttl time.Duration) (dlock.Locker, error) {
					l, err := t.Open(ctx, ep, ttl)
					if err != nil {
						return nil, err
					}
					return wraps[i](l, int(opened.Add(1)-1)), nil
				}
				s, err := scaling(ctx, e, p, ttl, []int{n}, d)
				if err != nil {
					return run, err
				}
				run.Points = append(run.Points, s.Points...)
			}
			return run, nil
		})
		if err != nil {
			return out[:i], fmt.Errorf("%s: %w", out[i].Primitive, err)
		}
	}
	return out, nil
}

// permitTaker is a Locker whose Acquire takes a permit of the semaphore named key,
// of PrimPermits permits.
type permitTaker struct{ dlock.Locker }

func (p permitTaker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	s, err := dlock.NewSemaphore(p.Locker, key, PrimPermits)
	if err != nil {
		return nil, err
	}
	return s.Acquire(ctx, opts...)
}

// rwTaker is a Locker whose Acquire takes the read-write lock named key: an
// exclusive lease for a writer, a shared one otherwise.
type rwTaker struct {
	dlock.Locker
	writer bool
}

func (r rwTaker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	m, err := dlock.NewRWMutex(r.Locker, key)
	if err != nil {
		return nil, err
	}
	if r.writer {
		return m.Acquire(ctx, opts...)
	}
	return m.AcquireShared(ctx, opts...)
}

func primScalingString(ps []PrimScale) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, p.Primitive+": "+p.Scaling.String())
	}
	return strings.Join(parts, "; ")
}
