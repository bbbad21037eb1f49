package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// closeTimeout bounds how long Close waits for the releases of the leases it ends.
const closeTimeout = 2 * time.Second

// New returns a Locker that runs d's algorithm under the shared machinery: key and
// TTL validation, the retry loop (woken by d's Notifier, or d's own Queuer), the
// conservative local validity deadline, auto-renewal, Done/Err bookkeeping, observer
// events and Close. Backend packages call it from their constructors; users need it
// only to plug in a backend of their own.
func New(d driver.Driver, info driver.Info) Locker {
	if info.Drift == nil {
		info.Drift = driver.DefaultDrift
	}
	l := &locker{d: d, info: info, closing: make(chan struct{}), leases: map[*lease]struct{}{}}
	l.queuer, _ = d.(driver.Queuer)
	l.notifier, _ = d.(driver.Notifier)
	return l
}

type locker struct {
	d        driver.Driver
	info     driver.Info
	queuer   driver.Queuer
	notifier driver.Notifier

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close: ends waits
	leases  map[*lease]struct{}
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return l.acquire(ctx, key, true, opts)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return l.acquire(ctx, key, false, opts)
}

func (l *locker) acquire(ctx context.Context, key string, wait bool, opts []Option) (Lease, error) {
	o := ApplyOptions(opts...)
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if err := ValidateTTL(ttl); err != nil {
		return nil, err
	}
	if !l.info.SessionTTL && ttl < l.info.MinTTL {
		return nil, fmt.Errorf("%w: %v is below the %s backend's minimum of %v", ErrInvalidTTL, ttl, l.info.Name, l.info.MinTTL)
	}
	if d := l.info.Drift(ttl); !l.info.SessionTTL && ttl <= d {
		return nil, fmt.Errorf("%w: %v leaves no validity after the %v clock-drift allowance (%s)", ErrInvalidTTL, ttl, d, l.info.Name)
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	a := attempt{l: l, key: key, ttl: ttl, opts: o}
	var start time.Time
	if o.Observer != nil {
		start = time.Now()
	}
	ls, err := a.run(ctx, wait)
	if o.Observer != nil {
		o.Observer.Observe(Event{Kind: EventAcquire, Backend: l.info.Name, Key: key,
			Duration: time.Since(start), Attempts: a.attempts, Contended: a.contended, Err: err})
	}
	if err != nil {
		return nil, err
	}
	return ls, nil
}

// attempt is the state of one Acquire or TryAcquire call.
type attempt struct {
	l         *locker
	key       string
	ttl       time.Duration
	opts      AcquireOptions
	attempts  int
	contended bool
}

func (a *attempt) run(ctx context.Context, wait bool) (*lease, error) {
	l := a.l
	// A backend's own queue serves waiters in order; a caller who asked for a retry
	// strategy gets it (bounded retries of TryLock) instead.
	if wait && l.queuer != nil && a.opts.Retry == nil {
		a.attempts = 1
		t0 := time.Now()
		lk, err := l.queuer.Lock(ctx, a.key, a.ttl)
		if err != nil {
			return nil, a.fail(ctx, err)
		}
		return l.grant(ctx, a, t0, lk)
	}
	retry := a.opts.Retry
	if retry == nil {
		retry = DefaultRetry
	}
	var wake <-chan struct{}
	subscribed := false
	retries := 0
	for {
		if l.isClosed() {
			return nil, ErrClosed
		}
		a.attempts++
		t0 := time.Now()
		lk, err := l.d.TryLock(ctx, a.key, a.ttl)
		var remaining time.Duration
		if err == nil {
			ls, gerr := l.grant(ctx, a, t0, lk)
			if !errors.Is(gerr, errValidityElapsed) {
				return ls, gerr
			}
			err = gerr
		} else if !isBusy(err, &remaining) {
			return nil, a.fail(ctx, err)
		}
		a.contended = true
		if !wait {
			if errors.Is(err, errValidityElapsed) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %q is held (%s)", ErrNotAcquired, a.key, l.info.Name)
		}
		if ctx.Err() != nil {
			return nil, a.fail(ctx, ctx.Err())
		}
		if l.notifier != nil && !subscribed {
			subscribed = true
			w, stop, serr := l.notifier.Subscribe(ctx, a.key)
			if serr == nil {
				defer stop()
				wake = w
				continue // the release may have come before the subscription: look again at once
			}
			// No wake-ups: fall back to the retry strategy alone.
		}
		retries++
		delay := retry.Backoff(retries)
		if delay < 0 {
			return nil, fmt.Errorf("%w: %q is held; gave up after %d attempts (%s)", ErrNotAcquired, a.key, a.attempts, l.info.Name)
		}
		if remaining > 0 && remaining+time.Millisecond < delay {
			delay = remaining + time.Millisecond
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
		case <-l.closing:
		}
		t.Stop()
	}
}

// fail turns an error from the backend into the error Acquire returns.
func (a *attempt) fail(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTTL):
		return err
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w: %q (%s): %w", ErrNotAcquired, a.key, a.l.info.Name, err)
		}
		return fmt.Errorf("%w: %q (%s): %w (%w)", ErrNotAcquired, a.key, a.l.info.Name, ctx.Err(), err)
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrUnavailable):
		return err
	}
	return fmt.Errorf("dlock: %s: %w", a.l.info.Name, err)
}

func isBusy(err error, remaining *time.Duration) bool {
	var b *driver.BusyError
	if errors.As(err, &b) {
		*remaining = b.Remaining
		return true
	}
	return errors.Is(err, ErrNotAcquired)
}

var errValidityElapsed = errors.New("validity elapsed before the grant arrived")

// grant wraps a lock the driver took into a lease, or gives it back when its
// validity was used up by the request itself or the Locker closed meanwhile.
func (l *locker) grant(ctx context.Context, a *attempt, t0 time.Time, lk driver.Lock) (*lease, error) {
	ls := &lease{l: l, key: a.key, lk: lk, token: lk.Token(), ttl: a.ttl, obs: a.opts.Observer,
		granted: time.Now(), done: make(chan struct{})}
	if vf, ok := lk.(driver.ValidFrom); ok && vf.ValidFrom().After(t0) {
		t0 = vf.ValidFrom() // both bound the store's TTL; the later one is the tighter
	}
	if !l.info.SessionTTL {
		ls.deadline = t0.Add(a.ttl - l.info.Drift(a.ttl))
		if !ls.granted.Before(ls.deadline) {
			l.giveBack(lk)
			return nil, fmt.Errorf("%w: %w (%s, ttl %v)", ErrNotAcquired, errValidityElapsed, l.info.Name, a.ttl)
		}
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.giveBack(lk)
		return nil, ErrClosed
	}
	l.leases[ls] = struct{}{}
	l.mu.Unlock()
	if !l.info.SessionTTL {
		ls.mu.Lock()
		ls.timer = time.AfterFunc(time.Until(ls.deadline), ls.expire)
		ls.mu.Unlock()
		if a.opts.AutoRenew {
			ls.autoRenew = true
			go ls.renewLoop()
		}
	}
	if s, ok := lk.(driver.Sessioned); ok {
		go ls.watchSession(s)
	}
	return ls, nil
}

// giveBack releases a lock that will not become a lease, best effort.
func (l *locker) giveBack(lk driver.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = lk.Unlock(ctx)
}

func (l *locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

func (l *locker) forget(ls *lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}

func (l *locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.closing)
	held := make([]*lease, 0, len(l.leases))
	for ls := range l.leases {
		held = append(held, ls)
	}
	l.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, ls := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls.closeRelease(ctx)
		}()
	}
	wg.Wait()
	if err := l.d.Close(); err != nil {
		return fmt.Errorf("dlock: %s: close: %w", l.info.Name, err)
	}
	return nil
}
