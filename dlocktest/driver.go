package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// ErrFault is what the calls a fault made fail return (wrapped, with which fault):
// a refresh failed by FailRefreshes, a reply lost by LoseReplies, a call on a
// closed client. A call that waits for an answer that does not come (Hang,
// Partition) returns its context's error instead, as a real client does.
var ErrFault = errors.New("dlocktest: injected fault")

// memDriver is what memlock.NewDriver returns: every interface a Client's driver
// passes on.
type memDriver interface {
	driver.Driver
	driver.Waiter
	driver.Notifier
	driver.Semaphorer
	driver.SemaphoreWaiter
	driver.RWLocker
	driver.RWWaiter
	driver.Elector
	driver.CampaignNotifier
}

// clientDriver is a Client's driver: memlock's, with the faults of the Store and
// of the client on every call.
type clientDriver struct{ c *Client }

var (
	_ memDriver        = (*clientDriver)(nil)
	_ driver.Sessioned = (*lock)(nil)
	_ driver.ValidFrom = (*lock)(nil)
)

func (d *clientDriver) mem() memDriver { return d.c.s.inner }

func (d *clientDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: acquire", key, "", false, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().TryLock(ctx, key, ttl)
	})
}

func (d *clientDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: wait", key, "", true, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().Lock(ctx, key, ttl)
	})
}

func (d *clientDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: acquire", key, "permit", false, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().TryLockSemaphore(ctx, key, limit, ttl)
	})
}

func (d *clientDriver) LockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: wait", key, "permit", true, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().LockSemaphore(ctx, key, limit, ttl)
	})
}

func rwKind(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

func (d *clientDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: acquire", key, rwKind(shared), false, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().TryLockRW(ctx, key, shared, ttl)
	})
}

func (d *clientDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: wait", key, rwKind(shared), true, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().LockRW(ctx, key, shared, ttl)
	})
}

func (d *clientDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	return d.c.grant(ctx, "store: acquire", name, "term", false, ttl, func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
		return d.mem().TryCampaign(ctx, name, value, ttl)
	})
}

func (d *clientDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	var l driver.Leader
	err := d.c.call(ctx, "store: leader", name, nil, d.c.fate("store: leader", name, 0, false), func(ctx context.Context) (uint64, error) {
		var err error
		l, err = d.mem().Leader(ctx, name)
		return 0, err
	})
	return l, err
}

// WatchLeaders meets the client's and the Store's faults when it starts; not
// while it watches.
func (d *clientDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	if err := d.c.call(ctx, "store: watch leaders", name, nil, d.c.fate("store: watch leaders", name, 0, false), func(context.Context) (uint64, error) { return 0, nil }); err != nil {
		return err
	}
	return d.mem().WatchLeaders(ctx, name, after, found)
}

func (d *clientDriver) CampaignWake(name string) string { return d.mem().CampaignWake(name) }

// Subscribe passes memlock's release notifications on, without faults.
func (d *clientDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.mem().Subscribe(ctx, key)
}

// Close marks the client's driver closed: a call after it fails with ErrFault (and
// says so in the History), as a real client's closed connection would.
//
// dlock.New promises to close a driver only once the calls in flight have
// returned (an automatic renewal's cancelled), or closeDrain after its Close
// began: a driver closed earlier, with calls in flight whose context is alive, is
// a breach of that promise the Store keeps (breaches).
func (d *clientDriver) Close() error {
	c := d.c
	now := time.Now()
	c.mu.Lock()
	c.closed = true
	inFlight := 0 // calls in flight whose context has not ended (a cancelled renewal's has)
	for ctx := range c.inFlight {
		if (*ctx).Err() == nil {
			inFlight++
		}
	}
	closing := c.closing
	c.mu.Unlock()
	note := ""
	if inFlight > 0 {
		note = fmt.Sprintf("%d calls in flight", inFlight)
		if closing.IsZero() || now.Sub(closing) < closeDrain {
			c.s.breach(fmt.Sprintf("%s's driver was closed %v after its Close began with %d calls in flight (the lease core waits for them up to %v)",
				c.name, now.Sub(closing), inFlight, closeDrain))
		}
	}
	c.s.record(Event{At: c.s.since(now), Client: c.name, What: "store: connection closed", Note: note})
	return nil
}

// closeDrain is how long dlock.New's Close waits for the calls in flight before
// it closes the driver (its closeDrainTimeout).
const closeDrain = 3 * time.Second

// fate is what one call meets on its way to the store and back.
type fate struct {
	fail       bool          // the request does not reach the store: the call fails at once
	hang       bool          // no answer: the call waits until its context ends, not run
	loseReply  bool          // the store runs it and its reply is lost: the call fails at once
	delay      time.Duration // the store runs it and its reply arrives this late
	grantOnly  bool          // delay only a reply that grants a lock
	afterClose bool          // the call came after the client's Close: it fails at once
	note       string        // which fault, for the History
}

func (f fate) any() bool { return f.fail || f.hang || f.loseReply || f.delay > 0 }

// fate decides the faults one call meets (besides a hung store and a partition,
// which it meets while they last). grant: the call asks for a lock.
func (c *Client) fate(what, key string, token uint64, grant bool) fate {
	var f fate
	c.mu.Lock()
	switch {
	case c.closed:
		f = fate{fail: true, afterClose: true, note: "after the client's Close"}
	case what == "store: refresh" && c.failRefreshes > 0:
		c.failRefreshes--
		f = fate{fail: true, note: "FailRefreshes"}
	case c.loseReplies > 0:
		c.loseReplies--
		f = fate{loseReply: true, note: "LoseReplies"}
	case grant && c.grantDelay > 0:
		f = fate{delay: c.grantDelay, grantOnly: true, note: fmt.Sprintf("DelayGrants %v", c.grantDelay)}
	}
	c.mu.Unlock()
	if !f.any() && c.s.schedule != nil {
		f = c.s.schedule(c, what, key, token)
	}
	return f
}

// gate returns what a call of c waits on before it can reach the store, or its
// reply can come back: nil when nothing stops it.
func (c *Client) gate() chan struct{} {
	c.s.mu.Lock()
	hung := c.s.hung
	c.s.mu.Unlock()
	if hung != nil {
		return hung
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// pass waits until nothing stops a call (a hung store, a partition), or ctx ends.
func (c *Client) pass(ctx context.Context) error {
	for g := c.gate(); g != nil; g = c.gate() {
		select {
		case <-g:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// call runs one call of c on the store (run) under the faults it meets, records
// it, and returns its error. lk is the lock a refresh or release is about (nil for
// the rest); run returns the token of a lock it granted (0 for none). f is the
// fault the call meets (c.fate).
func (c *Client) call(ctx context.Context, what, key string, lk *lock, f fate, run func(context.Context) (uint64, error)) error {
	start := time.Now()
	var token uint64
	if lk != nil {
		token = lk.token
	}
	c.mu.Lock()
	if c.inFlight == nil {
		c.inFlight = map[*context.Context]struct{}{}
	}
	c.inFlight[&ctx] = struct{}{}
	closing := c.closing
	c.mu.Unlock()
	if f.afterClose && (closing.IsZero() || start.Sub(closing) < closeDrain) {
		c.s.breach(fmt.Sprintf("%s: %s %q reached the driver %v after the client's Close began, after the driver was closed", c.name, what, key, start.Sub(closing)))
	}
	granted, err := c.attempt(ctx, lk, f, run)
	c.mu.Lock()
	delete(c.inFlight, &ctx)
	c.mu.Unlock()
	if granted != 0 {
		token = granted
	}
	c.s.record(Event{At: c.s.since(start), Took: time.Since(start), Client: c.name, What: what, Key: key, Token: token, Err: errString(err), Note: f.note})
	return err
}

// attempt is call's way to the store and back.
func (c *Client) attempt(ctx context.Context, lk *lock, f fate, run func(context.Context) (uint64, error)) (uint64, error) {
	if lk != nil && (f.fail || f.hang) && !f.afterClose {
		lk.faulted()
	}
	switch {
	case f.fail:
		return 0, fmt.Errorf("%w: %s", ErrFault, f.note)
	case f.hang:
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if err := c.pass(ctx); err != nil {
		return 0, err
	}
	granted, err := run(ctx)
	if f.loseReply {
		if lk != nil {
			lk.faulted()
		}
		return granted, fmt.Errorf("%w: the store acted; its reply was lost (%s)", ErrFault, f.note)
	}
	if f.delay > 0 && (granted != 0 || !f.grantOnly) {
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			if lk != nil {
				lk.faulted()
			}
			return granted, ctx.Err()
		}
	}
	if perr := c.pass(ctx); perr != nil {
		if lk != nil {
			lk.faulted()
		}
		return granted, perr
	}
	return granted, err
}

// grant runs one request for a lock (try: the store's answer at once; wait: its
// queue, as driver.Waiter does). kind is what the lock is ("" a mutex, "permit",
// "shared", "exclusive", "term").
func (c *Client) grant(ctx context.Context, what, key, kind string, wait bool, ttl time.Duration,
	run func(context.Context, time.Duration) (driver.Lock, error)) (driver.Lock, error) {
	if kind != "" {
		what += " " + kind
	}
	var lk *lock
	err := c.call(ctx, what, key, nil, c.fate(what, key, 0, true), func(ctx context.Context) (uint64, error) {
		scaled := c.scale(ttl)
		inner, err := run(ctx, scaled)
		if err != nil {
			return 0, err
		}
		lk = c.s.adopt(c, inner, key, kind, scaled)
		return lk.token, nil
	})
	switch {
	case err == nil:
		lk.mu.Lock()
		lk.delivered = true
		lk.mu.Unlock()
		return lk, nil
	case lk != nil:
		lk.faulted()
		if wait && ctx.Err() != nil {
			// A waiter whose context ended leaves nothing behind (driver.Waiter): the
			// grant its reply was carrying is given back.
			lk.storeFree("given back: the wait ended before the grant arrived")
		}
	}
	return nil, err
}

// scale is ttl on the store's clock for a client whose clock runs at rate.
func (c *Client) scale(ttl time.Duration) time.Duration {
	c.mu.Lock()
	r := c.rate
	c.mu.Unlock()
	if r == 1 {
		return ttl
	}
	return time.Duration(float64(ttl) * r)
}

// lock is one grant of the Store: memlock's lock, with the faults of its client on
// its refreshes and releases, and what the Store knows of it. It is
// driver.Sessioned so that Lose can tell its lease.
type lock struct {
	c     *Client
	inner driver.Lock
	key   string
	kind  string
	token uint64

	lost     chan struct{}
	lostOnce sync.Once
	cause    error

	mu        sync.Mutex
	expires   time.Time // when the store lets it go, on the store's clock
	freed     string    // why the store no longer holds it ("" while it does, until expires)
	delivered bool      // the grant reached the client
	fault     bool      // a fault hit a reply about it: the client may not know what the store did
	watched   bool      // its lease's end is being recorded
}

// adopt wraps a lock memlock granted to c for ttl (on the store's clock).
func (s *Store) adopt(c *Client, inner driver.Lock, key, kind string, ttl time.Duration) *lock {
	lk := &lock{c: c, inner: inner, key: key, kind: kind, token: inner.Token(), lost: make(chan struct{})}
	lk.expires = lk.ValidFrom().Add(ttl)
	s.mu.Lock()
	s.locks[lk.token] = lk
	s.mu.Unlock()
	return lk
}

func (l *lock) Token() uint64 { return l.token }

// ValidFrom is when the store started the lock's TTL.
func (l *lock) ValidFrom() time.Time {
	if vf, ok := l.inner.(driver.ValidFrom); ok {
		return vf.ValidFrom()
	}
	return time.Time{}
}

func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.c.call(ctx, "store: refresh", l.key, l, l.c.fate("store: refresh", l.key, l.token, false), func(ctx context.Context) (uint64, error) {
		scaled := l.c.scale(ttl)
		now := time.Now()
		err := l.inner.Refresh(ctx, scaled)
		if err == nil {
			l.mu.Lock()
			l.expires = now.Add(scaled)
			l.mu.Unlock()
		}
		return 0, err
	})
}

// Unlock releases the lock, owner-checked. A release asked again after the owner's
// release went through (its reply lost) succeeds again, as on the stores whose
// release is idempotent for its owner (Redis's release script keeps a tombstone):
// the release was the owner's, not a loss.
func (l *lock) Unlock(ctx context.Context) error {
	return l.c.call(ctx, "store: release", l.key, l, l.c.fate("store: release", l.key, l.token, false), func(ctx context.Context) (uint64, error) {
		l.mu.Lock()
		again := l.freed == releasedByOwner
		l.mu.Unlock()
		if again {
			return 0, nil
		}
		err := l.inner.Unlock(ctx)
		if err == nil {
			l.markFreed(releasedByOwner)
		}
		return 0, err
	})
}

func (l *lock) Lost() <-chan struct{} { return l.lost }

func (l *lock) Cause() error {
	select {
	case <-l.lost:
		return l.cause
	default:
		return nil
	}
}

// report tells the lock's lease that the store took the lock away (cause: a
// *driver.LossError).
func (l *lock) report(cause error) {
	l.lostOnce.Do(func() {
		l.cause = cause
		close(l.lost)
	})
}

// storeFree makes the store let the lock go now (owner-checked: nothing happens if
// it is no longer this grant's), handing it to the next waiter.
func (l *lock) storeFree(why string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = l.inner.Unlock(ctx)
	l.markFreed(why)
}

// releasedByOwner is why a lock its owner released is free.
const releasedByOwner = "released by its owner"

func (l *lock) markFreed(why string) {
	l.mu.Lock()
	if l.freed == "" {
		l.freed = why
	}
	l.mu.Unlock()
}

func (l *lock) faulted() {
	l.mu.Lock()
	l.fault = true
	l.mu.Unlock()
}

// heldAt reports whether the store still holds the lock for its owner at t.
func (l *lock) heldAt(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.freed == "" && t.Before(l.expires)
}
