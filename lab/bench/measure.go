package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/measure"
)

// key is this run's key for target name and purpose: short (MySQL GET_LOCK names stop
// at 64 characters) and a valid ZooKeeper path for the peers that use it as one.
func key(ep Endpoints, name, purpose string) string {
	return "b" + ep.Run + "/" + slug(name) + "/" + purpose
}

// openN opens n clients of t, a few at a time; on error it closes those it opened.
func openN(ctx context.Context, t Target, ep Endpoints, timeout time.Duration, n int) ([]dlock.Locker, error) {
	ls := make([]dlock.Locker, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range ls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ls[i], errs[i] = t.Open(ctx, ep, timeout)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(ls)
		return nil, fmt.Errorf("open %d clients: %w", n, err)
	}
	return ls, nil
}

// closeAll closes every non-nil Locker, in parallel, and returns their errors.
func closeAll(ls []dlock.Locker) error {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		if l != nil {
			wg.Go(func() { errs[i] = l.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// contender is one party of an interleaved uncontended measurement.
type contender struct {
	cycle func(ctx context.Context) error
	close func()
}

// uncontended measures acquire+release cycles of base's raw round trips and of each
// target in turn (measure.Interleave), every one on a client and key of its own. It
// returns the raw latency (zero without a baseline) and one latency per target; a
// target that fails is dropped from the rounds and its error returned in errs.
func uncontended(ctx context.Context, ep Endpoints, base *baseline, targets []Target, ttl time.Duration, warmup, rounds int) (raw measure.Latency, lats []measure.Latency, errs []error, err error) {
	errs = make([]error, len(targets))
	lats = make([]measure.Latency, len(targets))
	// index -1 is the baseline.
	cs := map[int]contender{}
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	if base != nil {
		cycle, closeFn, err := base.open(ctx, ep, key(ep, "raw-"+string(base.Store)+"-"+slug(base.Name), "u"))
		if err != nil {
			return raw, lats, errs, fmt.Errorf("%s: %w", base.Name, err)
		}
		cs[-1] = contender{cycle, closeFn}
	}
	for i, t := range targets {
		l, err := t.Open(ctx, ep, ttl)
		if err != nil {
			errs[i] = fmt.Errorf("open: %w", err)
			continue
		}
		k := key(ep, t.Name, "u")
		cs[i] = contender{
			cycle: func(ctx context.Context) error { return measure.AcquireCycle(ctx, l, k, dlock.WithTTL(ttl)) },
			close: func() { _ = l.Close() },
		}
	}
	for {
		var order []int
		var fs []func() error
		for i := -1; i < len(targets); i++ {
			if c, ok := cs[i]; ok {
				order = append(order, i)
				fs = append(fs, func() error { return c.cycle(ctx) })
			}
		}
		var failed = -2
		for j, f := range fs {
			fs[j] = func() error {
				err := f()
				if err != nil {
					failed = order[j]
				}
				return err
			}
		}
		res, ierr := measure.Interleave(warmup, rounds, fs...)
		switch {
		case ierr == nil:
			for j, i := range order {
				if i < 0 {
					raw = res[j]
				} else {
					lats[i] = res[j]
				}
			}
			return raw, lats, errs, nil
		case ctx.Err() != nil:
			return raw, lats, errs, ctx.Err()
		case failed == -1:
			return raw, lats, errs, fmt.Errorf("%s: %w", base.Name, ierr)
		}
		errs[failed] = ierr
		cs[failed].close()
		delete(cs, failed)
	}
}

// Contention is measure.Contention with how often a waiter was passed over.
type Contention struct {
	measure.Contention
	// MaxPassed is the most grants to other clients while one Acquire waited. A
	// fair queue of n clients passes a waiter n-1 times at most, once by each
	// client ahead of it (one more may be counted: a grant made before the request
	// reached the store but counted after it was sent); a lock that lets a
	// releasing client barge back in passes some waiters many times. Unlike the
	// longest wait in time, it does not grow with the machine's stalls: a holder
	// descheduled for a few milliseconds makes every wait of a fair queue long,
	// and passes no one. It does count the client's own stalls before its request
	// reaches the store: the other clients go on meanwhile. A wait cut off when
	// the run ends counts; an Acquire that failed with dlock.ErrUnavailable and
	// was made again counts from the new call.
	MaxPassed int `json:",omitempty"`
}

// String is measure.Contention's line with the longest wait in rounds passed.
func (c Contention) String() string {
	return fmt.Sprintf("%s, longest wait %.1f rounds passed", c.Contention, c.MaxRounds())
}

// MaxRounds is MaxPassed in rounds of the other clients, MaxPassed / (Clients-1):
// 1 for a fair queue, 5 when a waiter saw each other client take the lock five
// times (0 with fewer than two clients).
func (c Contention) MaxRounds() float64 {
	if c.Clients < 2 {
		return 0
	}
	return float64(c.MaxPassed) / float64(c.Clients-1)
}

// passCount counts the grants of a contended run in the order they are made, and
// the most of them one Acquire waited through.
type passCount struct {
	granted, max atomic.Int64
}

// passCounted is a client of a contended run whose Acquire is counted in a
// passCount, also one that ends without the lock. A grant is counted before Acquire returns, so before the lease can be
// released and the next grant made: the count is in grant order.
type passCounted struct {
	dlock.Locker
	c *passCount
}

func (l passCounted) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	before := l.c.granted.Load()
	ls, err := l.Locker.Acquire(ctx, key, opts...)
	// A wait that ends without the lock (the run is over) counts too: a client
	// that never got the lock was passed over by every grant of the run.
	passed := l.c.granted.Load() - before
	for m := l.c.max.Load(); passed > m && !l.c.max.CompareAndSwap(m, passed); m = l.c.max.Load() {
	}
	if err == nil {
		l.c.granted.Add(1)
	}
	return ls, err
}

// contended runs n clients of t on one key for d (measure.Contend, no hold time),
// counting how often a waiter was passed over.
func contended(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, n int, d time.Duration) (Contention, error) {
	ls, err := openN(ctx, t, ep, ttl, n)
	if err != nil {
		return Contention{}, err
	}
	var count passCount
	counted := make([]dlock.Locker, len(ls))
	for i, l := range ls {
		counted[i] = passCounted{l, &count}
	}
	c, err := measure.Contend(ctx, counted, key(ep, t.Name, "c"), d, 0, dlock.WithTTL(ttl))
	return Contention{Contention: c, MaxPassed: int(count.max.Load())}, errors.Join(err, closeAll(ls))
}

// manyKeys runs n clients of t over keys keys for d (measure.ManyKeys).
func manyKeys(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, n, keys int, d time.Duration) (measure.Throughput, error) {
	ls, err := openN(ctx, t, ep, ttl, n)
	if err != nil {
		return measure.Throughput{}, err
	}
	tp, err := measure.ManyKeys(ctx, ls, key(ep, t.Name, "mk"), keys, d, dlock.WithTTL(ttl))
	return tp, errors.Join(err, closeAll(ls))
}

// allocs counts the heap allocations of n acquire+release cycles of one client of t,
// after a warm-up.
func allocs(ctx context.Context, ep Endpoints, t Target, ttl time.Duration, warmup, n int) (Allocs, error) {
	l, err := t.Open(ctx, ep, ttl)
	if err != nil {
		return Allocs{}, err
	}
	defer l.Close()
	k := key(ep, t.Name, "a")
	return countAllocs(warmup, n, func() error { return measure.AcquireCycle(ctx, l, k, dlock.WithTTL(ttl)) })
}

// rawAllocs is allocs for a baseline.
func rawAllocs(ctx context.Context, ep Endpoints, b baseline, warmup, n int) (Allocs, error) {
	cycle, closeFn, err := b.open(ctx, ep, key(ep, "raw-"+string(b.Store)+"-"+slug(b.Name), "a"))
	if err != nil {
		return Allocs{}, err
	}
	defer closeFn()
	return countAllocs(warmup, n, func() error { return cycle(ctx) })
}

func countAllocs(warmup, n int, f func() error) (Allocs, error) {
	for range warmup {
		if err := f(); err != nil {
			return Allocs{}, err
		}
	}
	a, b, err := measure.Allocs(n, f)
	return Allocs{PerCycle: a, BytesPerCycle: b}, err
}

// crashHold is how long the holder keeps the lock, with the waiter already waiting,
// before its link is cut.
const crashHold = 200 * time.Millisecond

// crash measures, trials times, how long after a holder vanishes another client gets
// the lock: a holder whose every connection leads through a servers.Proxy takes the
// lock (TTL, or session timeout, = timeout), a second client starts waiting for it,
// crashHold later every proxy is cut (connections closed, new ones refused: to the
// servers the holder is gone as if its process had died), and the time until the
// waiter's Acquire returns is one sample. The holder is never released.
func crash(ctx context.Context, e *env, t Target, timeout time.Duration, trials int) (Crash, error) {
	res := Crash{Timeout: t.CrashNote(timeout)}
	var closing sync.WaitGroup
	defer closing.Wait()
	for i := range trials {
		d, err := crashOnce(ctx, e, t, timeout, key(e.ep, t.Name, fmt.Sprintf("x%d", i)), &closing)
		if err != nil {
			return res, fmt.Errorf("trial %d: %w", i+1, err)
		}
		res.Trials = append(res.Trials, d)
	}
	lat := measure.Summarize(append([]time.Duration(nil), res.Trials...))
	res.P50, res.Max = lat.P50, lat.Max
	return res, nil
}

func crashOnce(ctx context.Context, e *env, t Target, timeout time.Duration, k string, closing *sync.WaitGroup) (time.Duration, error) {
	hep, proxies, err := e.proxies(t.Store)
	if err != nil {
		return 0, err
	}
	// The holder and its proxies go away in the background once its link is cut: some
	// clients take a while (a bounded release attempt, a session close) to give up.
	var holder dlock.Locker
	defer closing.Go(func() {
		if holder != nil {
			_ = holder.Close()
		}
		for _, p := range proxies {
			p.Close()
		}
	})
	if holder, err = t.Open(ctx, hep, timeout); err != nil {
		return 0, fmt.Errorf("open holder: %w", err)
	}
	waiter, err := t.Open(ctx, e.ep, timeout)
	if err != nil {
		return 0, fmt.Errorf("open waiter: %w", err)
	}
	defer waiter.Close()
	if _, err := holder.Acquire(ctx, k, dlock.WithTTL(timeout)); err != nil {
		return 0, fmt.Errorf("holder: %w", err)
	}
	type grant struct {
		at  time.Time
		ls  dlock.Lease
		err error
	}
	got := make(chan grant, 1)
	wctx, cancel := context.WithTimeout(ctx, 3*timeout+20*time.Second)
	defer cancel()
	go func() {
		ls, err := waiter.Acquire(wctx, k, dlock.WithTTL(timeout))
		got <- grant{time.Now(), ls, err}
	}()
	release := func(g grant) {
		if g.ls != nil {
			_ = g.ls.Release(ctx)
		}
	}
	select {
	case g := <-got:
		release(g)
		if g.err != nil {
			return 0, fmt.Errorf("waiter: %w", g.err)
		}
		return 0, errors.New("the waiter got the lock while the holder still held it")
	case <-time.After(crashHold):
	}
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	g := <-got
	release(g)
	if g.err != nil {
		return 0, fmt.Errorf("waiter after the crash: %w", g.err)
	}
	return g.at.Sub(cut), nil
}
