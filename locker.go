package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// closeTimeout bounds how long Close waits for the releases of the leases it ends,
// and how long a grant that will not become a lease may take to be given back.
const closeTimeout = time.Second

// closeDrainTimeout bounds how long Close waits, from its start, for the calls in
// flight (Acquire, TryAcquire, Release, Refresh, a lost set's give-back) to end
// — a cancelled wait's clean-up included (the backends bound theirs by 2s). Close
// then closes the driver, which each backend keeps under a second, so that Close
// returns within 4s whatever the store does.
const closeDrainTimeout = 3 * time.Second

// minRetryDelay is the shortest wait between two attempts of Acquire: a strategy
// that asks for less (ConstantBackoff(0)) would otherwise spin on the store.
const minRetryDelay = time.Millisecond

// New returns a Locker that runs d's algorithm under the shared machinery: key and
// TTL validation, the retry loop (woken by d's Notifier, or d's own wait as a
// Waiter), the conservative local validity deadline, auto-renewal, Done/Err
// bookkeeping, observer events and Close. Backend packages call it from their
// constructors; users need it only to plug in a backend of their own (see package
// driver for what a backend implements).
func New(d driver.Driver, info driver.Info) Locker {
	if info.Drift == nil {
		info.Drift = driver.StandardDrift
	}
	l := &locker{d: d, info: info, leases: map[*lease]struct{}{}}
	l.closeCtx, l.closeAll = context.WithCancelCause(context.Background())
	l.waiter, _ = d.(driver.Waiter)
	l.notifier, _ = d.(driver.Notifier)
	return l
}

type locker struct {
	d        driver.Driver
	info     driver.Info
	waiter   driver.Waiter
	notifier driver.Notifier

	// closeCtx is cancelled, with cause ErrClosed, by Close: it ends every wait.
	closeCtx context.Context
	closeAll context.CancelCauseFunc

	mu       sync.Mutex
	closed   bool
	leases   map[*lease]struct{}
	inFlight int           // calls using the driver (enter/leave); not the renewals, which Close cancels
	drained  chan struct{} // made by Close when calls are in flight; closed when none is left
}

// enter registers a call that is about to use the driver, so that Close waits for it
// before closing the driver. It returns false once Close has begun: the caller must
// then not use the driver. Every true must be followed by one leave.
func (l *locker) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.inFlight++
	return true
}

// leave ends a call registered by enter.
func (l *locker) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	if l.inFlight == 0 && l.drained != nil {
		close(l.drained)
		l.drained = nil
	}
}

// checkTTL returns nil for a TTL the backend can honour and an error wrapping
// ErrInvalidTTL otherwise: not positive, below the backend's minimum, or no longer
// than its clock-drift allowance (which would leave no validity).
func (l *locker) checkTTL(ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if l.info.SessionTTL {
		return nil
	}
	if ttl < l.info.MinTTL {
		return fmt.Errorf("%w: %v is below the %s backend's minimum of %v", ErrInvalidTTL, ttl, l.info.Name, l.info.MinTTL)
	}
	if d := l.info.Drift(ttl); ttl <= d {
		return fmt.Errorf("%w: %v leaves no validity after the %v clock-drift allowance (%s)", ErrInvalidTTL, ttl, d, l.info.Name)
	}
	return nil
}

// request is what one kind of acquisition asks of the driver: the mutex's TryLock
// and Lock, or a primitive's (a permit, a shared lease, …).
type request struct {
	key string // the name the caller gave (validated, in errors and events)
	// try makes one attempt: a Lock, driver.Busy, or an error.
	try func(ctx context.Context, ttl time.Duration) (driver.Lock, error)
	// wait, if not nil, waits for the lock itself (driver.Waiter): Acquire without
	// WithRetry calls it instead of retrying try.
	wait func(ctx context.Context, ttl time.Duration) (driver.Lock, error)
	// wake is the name whose releases the driver's Notifier announces ("" for none).
	wake string
	// checked: the caller validated what key names (a set of keys: AcquireAll),
	// and key is not itself a lock name.
	checked bool
}

func (l *locker) Acquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return l.acquire(ctx, l.mutex(key), true, opts)
}

func (l *locker) TryAcquire(ctx context.Context, key string, opts ...Option) (Lease, error) {
	return l.acquire(ctx, l.mutex(key), false, opts)
}

// mutex is the request of Acquire and TryAcquire.
func (l *locker) mutex(key string) request {
	r := request{key: key, wake: key,
		try: func(ctx context.Context, ttl time.Duration) (driver.Lock, error) { return l.d.TryLock(ctx, key, ttl) }}
	if l.waiter != nil {
		r.wait = func(ctx context.Context, ttl time.Duration) (driver.Lock, error) { return l.waiter.Lock(ctx, key, ttl) }
	}
	return r
}

// acquire runs r under the shared machinery: validation, the retry loop or the
// driver's own wait, the grant, observer events. Primitives (semaphores, read-write
// locks, …) call it with requests of their own.
func (l *locker) acquire(ctx context.Context, r request, wait bool, opts []Option) (Lease, error) {
	o := applyOptions(opts...)
	key := r.key
	if !r.checked {
		if err := ValidateKey(key); err != nil {
			return nil, err
		}
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if err := l.checkTTL(ttl); err != nil {
		return nil, err
	}
	if err := validateHolder(o.Holder); err != nil {
		return nil, err
	}
	// Close waits for the whole call: a wait's clean-up, and the release of a grant
	// that lands while it closes, run before the driver closes.
	if !l.enter() {
		return nil, ErrClosed
	}
	defer l.leave()
	a := attempt{l: l, r: r, key: key, ttl: ttl, opts: o}
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
	r         request
	key       string
	ttl       time.Duration
	opts      AcquireOptions
	attempts  int
	contended bool
}

func (a *attempt) run(ctx context.Context, wait bool) (*lease, error) {
	l := a.l
	// A backend's own wait (its queue) serves waiters in order; a caller who asked
	// for a retry strategy gets it (bounded retries of TryLock) instead.
	if wait && a.r.wait != nil && a.opts.Retry == nil {
		// Close ends the wait: its context is cancelled with cause ErrClosed. (TryLock
		// gets the caller's context as it is: a driver may let requests it sent run on
		// after TryLock returned, bounded by that context.)
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(l.closeCtx, func() { cancel(ErrClosed) })()
		a.attempts = 1
		t0 := time.Now()
		lk, err := a.r.wait(a.holder(wctx, t0), a.ttl)
		if err != nil {
			if errors.Is(context.Cause(wctx), ErrClosed) {
				return nil, ErrClosed
			}
			var remaining time.Duration
			if isBusy(err, &remaining) {
				a.contended = true
				return nil, fmt.Errorf("%w: %q is held; the wait gave up (%s): %w", ErrNotAcquired, a.key, l.info.Name, err)
			}
			return nil, a.fail(ctx, err)
		}
		return l.grant(a, t0, lk)
	}
	retry := a.opts.Retry
	if retry == nil {
		retry = DefaultRetry
	}
	var wake <-chan struct{}
	subscribed := false
	retries := 0
	for {
		if l.closeCtx.Err() != nil {
			return nil, ErrClosed
		}
		if ctx.Err() != nil {
			return nil, a.fail(ctx, ctx.Err())
		}
		a.attempts++
		t0 := time.Now()
		lk, err := a.r.try(a.holder(ctx, t0), a.ttl)
		var remaining time.Duration
		if err == nil {
			ls, gerr := l.grant(a, t0, lk)
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
		if l.notifier != nil && a.r.wake != "" && !subscribed {
			subscribed = true
			w, stop, serr := l.notifier.Subscribe(ctx, a.r.wake)
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
		t := time.NewTimer(max(delay, minRetryDelay))
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
		case <-l.closeCtx.Done():
		}
		t.Stop()
	}
}

// holder returns ctx carrying the caller's Holder record (WithHolder), stamped with
// the time the request is sent, for the driver to write with its claim; ctx itself
// when there is none.
func (a *attempt) holder(ctx context.Context, sent time.Time) context.Context {
	if a.opts.Holder.IsZero() {
		return ctx
	}
	h := a.opts.Holder
	h.Since = sent
	return driver.WithHolder(ctx, h)
}

// fail turns an error from the backend into the error Acquire returns.
func (a *attempt) fail(ctx context.Context, err error) error {
	switch {
	case a.l.closeCtx.Err() != nil, errors.Is(err, ErrClosed):
		return ErrClosed
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTTL):
		return err
	case ctx.Err() != nil:
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%w: %q (%s): %w", ErrNotAcquired, a.key, a.l.info.Name, err)
		}
		return fmt.Errorf("%w: %q (%s): %w (%w)", ErrNotAcquired, a.key, a.l.info.Name, ctx.Err(), err)
	case errors.Is(err, ErrUnavailable):
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
	return false
}

var errValidityElapsed = errors.New("validity elapsed before the grant arrived")

// grant wraps a lock the driver took into a lease, or gives it back when its
// validity was used up by the request itself or the Locker closed meanwhile.
func (l *locker) grant(a *attempt, t0 time.Time, lk driver.Lock) (*lease, error) {
	ls := newLease(l, a.key, lk, a.ttl, a.opts.Observer)
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
	ls.start(a.opts.AutoRenew)
	return ls, nil
}

// giveBack releases a lock that will not become a lease, best effort. A set's
// watches of its keys stop whatever the release found (a key whose TTL ran out
// while the grant was on its way is not ours to release): no lease will end them.
func (l *locker) giveBack(lk driver.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = lk.Unlock(ctx)
	if s, ok := lk.(*setLock); ok {
		s.stopWatching()
	}
}

func (l *locker) forget(ls *lease) {
	l.mu.Lock()
	delete(l.leases, ls)
	l.mu.Unlock()
}

// Close ends the waits (their contexts are cancelled with cause ErrClosed), gives
// every held lease up — released within closeTimeout (1s) where the store answers,
// ended with ErrClosed either way — waits for the calls still in flight to end (a
// cancelled wait's clean-up, a grant that lands meanwhile and is given back, a
// Release), up to closeDrainTimeout (3s) from its start, and then closes the driver.
func (l *locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.closeAll(ErrClosed)
	held := make([]*lease, 0, len(l.leases))
	for ls := range l.leases {
		held = append(held, ls)
	}
	var drained chan struct{}
	if l.inFlight > 0 {
		drained = make(chan struct{})
		l.drained = drained
	}
	l.mu.Unlock()
	drainBy := time.Now().Add(closeDrainTimeout)

	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, ls := range held {
		wg.Go(func() { ls.closeRelease(ctx) })
	}
	wg.Wait()
	if drained != nil {
		t := time.NewTimer(time.Until(drainBy))
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
	}
	if err := l.d.Close(); err != nil {
		return fmt.Errorf("dlock: %s: close: %w", l.info.Name, err)
	}
	return nil
}
