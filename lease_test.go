package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/driver"
)

// hangStore is a lock store that stops answering on request: once hung, Refresh
// and Unlock block until their context ends (as a SIGSTOPped server does), and it
// tells the test when a refresh has started.
type hangStore struct {
	hung      atomic.Bool
	refreshed chan struct{} // a refresh started while hung
}

func newHangStore() *hangStore { return &hangStore{refreshed: make(chan struct{}, 16)} }

func (s *hangStore) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return hangLock{s}, nil
}
func (s *hangStore) Close() error { return nil }

type hangLock struct{ s *hangStore }

func (l hangLock) Token() uint64 { return 1 }
func (l hangLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if !l.s.hung.Load() {
		return nil
	}
	select {
	case l.s.refreshed <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}
func (l hangLock) Unlock(ctx context.Context) error {
	if !l.s.hung.Load() {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestReleaseDuringHungRenewal: while an auto-renewal hangs on a store that stopped
// answering, Release returns within its own context (it does not wait for the
// renewal), Done closes by the validity deadline, and Close gives up the release
// after 1s.
func TestReleaseDuringHungRenewal(t *testing.T) {
	s := newHangStore()
	l := dlock.New(s, driver.Info{Name: "hang"})
	const ttl = 900 * time.Millisecond
	start := time.Now()
	ls, err := l.TryAcquire(context.Background(), "k", dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	s.hung.Store(true)
	select {
	case <-s.refreshed: // the renewal at TTL/3 is in flight, and hangs
	case <-time.After(ttl):
		t.Fatal("no renewal started within the TTL")
	}

	const bound = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t0 := time.Now()
	err = ls.Release(ctx)
	took := time.Since(t0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Release on a hung store: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took > bound+100*time.Millisecond {
		t.Errorf("Release with a %v context took %v while a renewal hung", bound, took)
	}

	select {
	case <-ls.Done():
		if at := time.Since(start); at > ttl+50*time.Millisecond {
			t.Errorf("Done closed %v after the grant, past the %v TTL", at, ttl)
		}
		if !errors.Is(ls.Err(), dlock.ErrLost) {
			t.Errorf("Err after the hung renewals: %v, want ErrLost", ls.Err())
		}
	case <-time.After(2 * ttl):
		t.Fatalf("Done still open %v after the grant (TTL %v)", time.Since(start), ttl)
	}

	// Close with a lease whose release hangs: bounded by its 2s.
	ls2, err := l.TryAcquire(context.Background(), "k2", dlock.WithTTL(10*time.Second), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if took := time.Since(t0); took > time.Second+200*time.Millisecond {
		t.Errorf("Close took %v with a hung store, want at most its 1s bound for releases", took)
	}
	if !errors.Is(ls2.Err(), dlock.ErrClosed) {
		t.Errorf("a lease ended by Close: %v, want ErrClosed", ls2.Err())
	}
}

// TestReleaseAfterDeadline: Release called after the lease's validity deadline
// returns ErrNotHeld, even when it comes before the deadline timer has run (many
// leases expiring at once make the timers late).
func TestReleaseAfterDeadline(t *testing.T) {
	l := memlock.New(memlock.WithStore(memlock.NewStore()))
	defer l.Close()
	const n, ttl = 400, 200 * time.Millisecond
	var wg sync.WaitGroup
	var nils atomic.Int64
	for i := range n {
		wg.Go(func() {
			ls, err := l.TryAcquire(context.Background(), fmt.Sprint("k", i), dlock.WithTTL(ttl))
			if err != nil {
				t.Error(err)
				return
			}
			// The deadline is TTL − drift from the start of the request: 50µs past
			// that, counted from its end, is past the deadline — and often before the
			// deadline timer has run.
			sleepUntil(time.Now().Add(ttl - driver.StandardDrift(ttl) + 50*time.Microsecond))
			if err := ls.Release(context.Background()); err == nil {
				nils.Add(1)
			} else if !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Release after the deadline: %v, want ErrNotHeld", err)
			}
		})
	}
	wg.Wait()
	if k := nils.Load(); k > 0 {
		t.Errorf("%d of %d Releases after the validity deadline returned nil", k, n)
	}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestZeroRetryDelayIsClamped: a retry strategy that asks for no delay waits 1ms
// between attempts instead of spinning on the store.
func TestZeroRetryDelayIsClamped(t *testing.T) {
	s := memlock.NewStore()
	a, b := memlock.New(memlock.WithStore(s)), memlock.New(memlock.WithStore(s))
	defer a.Close()
	defer b.Close()
	if _, err := a.TryAcquire(context.Background(), "k", dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var attempts int
	obs := dlock.ObserverFunc(func(e dlock.Event) {
		if e.Kind == dlock.EventAcquire {
			attempts = e.Attempts
		}
	})
	const d = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if _, err := b.Acquire(ctx, "k", dlock.WithRetry(dlock.ConstantBackoff(0)), dlock.WithObserver(obs)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key: %v, want ErrNotAcquired", err)
	}
	if max := int(d/time.Millisecond) + 1; attempts > max {
		t.Errorf("%d attempts in %v with ConstantBackoff(0), want at most %d (1ms apart)", attempts, d, max)
	}
}

// lossStore grants locks whose refresh, release and session the test controls:
// Refresh and Unlock return refresh/unlock (nil: success), and closing lost ends the
// session with cause.
type lossStore struct {
	refresh, unlock error
	lost            chan struct{}
	cause           error
	// unlockLoses: Unlock ends the session (closes lost) before it returns unlock —
	// a driver whose check gave the lock up while the release waited for it.
	unlockLoses bool
}

func (s *lossStore) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return lossLock{s}, nil
}
func (s *lossStore) Close() error { return nil }

type lossLock struct{ s *lossStore }

func (l lossLock) Token() uint64                                { return 1 }
func (l lossLock) Refresh(context.Context, time.Duration) error { return l.s.refresh }
func (l lossLock) Unlock(context.Context) error {
	if l.s.unlockLoses {
		close(l.s.lost)
	}
	return l.s.unlock
}
func (l lossLock) Lost() <-chan struct{} { return l.s.lost }
func (l lossLock) Cause() error          { return l.s.cause }

// TestLossCauses: a lease that ends without Release says why (dlock.LossError):
// its Cause, HeldUntil when the store keeps the lock after the client gave it up,
// and errors.Is still matches ErrExpired or ErrLost; the Observer's end event
// carries the same Cause.
func TestLossCauses(t *testing.T) {
	later := time.Now().Add(time.Hour)
	for _, c := range []struct {
		name      string
		store     lossStore
		auto      bool
		end       func(ls dlock.Lease, s *lossStore) // nil: wait for the lease to end
		want      dlock.Cause
		sentinel  error
		heldUntil bool
	}{
		{name: "expired", want: dlock.CauseExpired, sentinel: dlock.ErrExpired},
		{name: "renewals failed", store: lossStore{refresh: errors.New("no answer")}, auto: true, want: dlock.CauseUnreachable, sentinel: dlock.ErrLost},
		{name: "refresh refused", store: lossStore{refresh: dlock.ErrNotHeld}, auto: true, want: dlock.CauseRefused, sentinel: dlock.ErrLost},
		{name: "release refused", store: lossStore{unlock: dlock.ErrNotHeld}, want: dlock.CauseRefused, sentinel: dlock.ErrLost,
			end: func(ls dlock.Lease, _ *lossStore) { _ = ls.Release(context.Background()) }},
		{name: "release crossing a session loss", store: lossStore{unlock: dlock.ErrNotHeld, unlockLoses: true,
			cause: &driver.LossError{Kind: driver.LossSilent, Err: errors.New("no answer")}},
			want: dlock.CauseUnreachable, sentinel: dlock.ErrLost,
			end: func(ls dlock.Lease, _ *lossStore) { _ = ls.Release(context.Background()) }},
		{name: "deleted", store: lossStore{cause: &driver.LossError{Kind: driver.LossDeleted, Err: errors.New("node deleted")}},
			want: dlock.CauseDeleted, sentinel: dlock.ErrLost},
		{name: "session ended", store: lossStore{cause: &driver.LossError{Kind: driver.LossSession, Err: errors.New("session expired")}},
			want: dlock.CauseSession, sentinel: dlock.ErrLost},
		{name: "session, unclassified", store: lossStore{cause: errors.New("gone")}, want: dlock.CauseSession, sentinel: dlock.ErrLost},
		{name: "silent", store: lossStore{cause: &driver.LossError{Kind: driver.LossSilent, HeldUntil: later, Err: errors.New("no answer")}},
			want: dlock.CauseUnreachable, sentinel: dlock.ErrLost, heldUntil: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.store
			s.lost = make(chan struct{})
			l := dlock.New(&s, driver.Info{Name: "loss"})
			defer l.Close()
			var ended []dlock.Event
			obs := dlock.ObserverFunc(func(e dlock.Event) {
				if e.Kind == dlock.EventEnd {
					ended = append(ended, e)
				}
			})
			opts := []dlock.Option{dlock.WithTTL(60 * time.Millisecond), dlock.WithObserver(obs)}
			if c.auto {
				opts = append(opts, dlock.WithAutoRenew())
			}
			ls, err := l.TryAcquire(context.Background(), "k", opts...)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.end != nil:
				c.end(ls, &s)
			case s.cause != nil:
				close(s.lost)
			}
			<-ls.Done()
			err = ls.Err()
			var le *dlock.LossError
			if !errors.As(err, &le) || le.Cause != c.want || !errors.Is(err, c.sentinel) {
				t.Fatalf("Err = %v (%#v); want a LossError of cause %v that is %v", err, le, c.want, c.sentinel)
			}
			if le.HeldUntil.IsZero() == c.heldUntil {
				t.Errorf("HeldUntil = %v, want it set: %v", le.HeldUntil, c.heldUntil)
			}
			if !strings.Contains(err.Error(), c.want.String()) {
				t.Errorf("Err() = %q does not name its cause %q", err, c.want)
			}
			if rerr := ls.Release(context.Background()); !errors.As(rerr, &le) || le.Cause != c.want {
				t.Errorf("Release of the ended lease: %v, want ErrNotHeld wrapping the LossError", rerr)
			}
			// The end was observed before Done closed.
			if len(ended) != 1 || ended[0].Cause != c.want || ended[0].Err != err {
				t.Errorf("end events %+v, want one with Cause %v and Err %v", ended, c.want, err)
			}
		})
	}
}

// orderStore records what its locks and Close do, in order; its second TryLock
// blocks until proceed is closed.
type orderStore struct {
	mu       sync.Mutex
	events   []string
	tries    int
	entered  chan struct{} // closed when the second TryLock has begun
	proceed  chan struct{}
	released chan struct{} // closed when the first lock is unlocked
}

func (s *orderStore) record(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *orderStore) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	s.mu.Lock()
	s.tries++
	n := s.tries
	s.mu.Unlock()
	if n == 2 {
		close(s.entered)
		<-s.proceed
	}
	return orderLock{s, n}, nil
}
func (s *orderStore) Close() error { s.record("driver closed"); return nil }

type orderLock struct {
	s *orderStore
	n int
}

func (l orderLock) Token() uint64                                { return uint64(l.n) }
func (l orderLock) Refresh(context.Context, time.Duration) error { return nil }
func (l orderLock) Unlock(context.Context) error {
	l.s.record(fmt.Sprintf("lock %d released", l.n))
	if l.n == 1 {
		close(l.s.released)
	}
	return nil
}

// TestCloseWaitsForCallsInFlight: a TryAcquire whose grant lands while the Locker
// closes gets ErrClosed, and its grant is given back before the driver closes.
func TestCloseWaitsForCallsInFlight(t *testing.T) {
	s := &orderStore{entered: make(chan struct{}), proceed: make(chan struct{}), released: make(chan struct{})}
	l := dlock.New(s, driver.Info{Name: "order"})
	ctx := context.Background()
	if _, err := l.TryAcquire(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	tried := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(ctx, "landing")
		tried <- err
	}()
	<-s.entered
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-s.released // Close has begun: it released the held lease
	close(s.proceed)
	if err := <-tried; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a TryAcquire granted during Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	want := []string{"lock 1 released", "lock 2 released", "driver closed"}
	if fmt.Sprint(s.events) != fmt.Sprint(want) {
		t.Fatalf("events %q, want %q: the grant that landed during Close is given back before the driver closes", s.events, want)
	}
}

// validityStore grants locks that keep their own validity deadline, as Redlock's
// do: a refresh before it fails as a store that does not answer would; one that
// starts at or after it is refused with ErrNotHeld without asking anyone (what
// redlock's Refresh did until it learned better).
type validityStore struct{ ttl time.Duration }

func (s *validityStore) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return &validityLock{until: time.Now().Add(ttl)}, nil
}
func (s *validityStore) Close() error { return nil }

type validityLock struct{ until time.Time }

func (l *validityLock) Token() uint64 { return 1 }
func (l *validityLock) Refresh(context.Context, time.Duration) error {
	if time.Now().Before(l.until) {
		return errors.New("no answer")
	}
	return dlock.ErrNotHeld
}
func (l *validityLock) Unlock(context.Context) error { return nil }

// TestRenewalPastDeadlineIsNotARefusal: an auto-renewed lease whose renewals all
// fail ends by its deadline as CauseUnreachable, also when a renewal starts at the
// deadline before the deadline's own timer has run: the lease core must not ask the
// driver then, nor take its answer for the store's refusal (CauseRefused). In a
// synctest bubble, with no drift allowance, the renewals retried every TTL/12 after
// the first at TTL/3 fall due at the deadline's very instant, and the scheduler runs
// the two timers' goroutines in either order: 200 leases make both orders occur.
func TestRenewalPastDeadlineIsNotARefusal(t *testing.T) {
	refused := 0
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			const ttl = 120 * time.Millisecond
			l := dlock.New(&validityStore{}, driver.Info{Name: "validity", Drift: func(time.Duration) time.Duration { return 0 }})
			defer l.Close()
			ls, err := l.TryAcquire(context.Background(), "k", dlock.WithTTL(ttl), dlock.WithAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			<-ls.Done()
			var le *dlock.LossError
			if !errors.As(ls.Err(), &le) {
				t.Fatalf("Err = %v, want a LossError", ls.Err())
			}
			switch le.Cause {
			case dlock.CauseUnreachable:
			case dlock.CauseRefused:
				refused++
			default:
				t.Fatalf("Err = %v, want cause %v", ls.Err(), dlock.CauseUnreachable)
			}
		})
	}
	if refused > 0 {
		t.Errorf("%d of 200 leases whose renewals never reached the store ended as refused (%v), want %v", refused, dlock.CauseRefused, dlock.CauseUnreachable)
	}
}
