package memlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Semaphores and read-write locks: one engine serves both. A key's primitive is
// kept apart from its mutex (Store.locks); it holds its live holders with their
// expiry and a queue of waiters in arrival order. A waiter is granted as soon as
// it is first in the queue and grantable — a semaphore below its limit; a shared
// lease with no exclusive holder; an exclusive lease with no holder at all — so a
// waiting exclusive acquirer keeps later shared ones out (writer preference), and
// TryLock fails while anyone waits.

type primKind string

const (
	kindSemaphore primKind = "semaphore"
	kindRW        primKind = "read-write lock"
)

// prim is the state of one key's semaphore or read-write lock.
type prim struct {
	kind    primKind
	limit   int // semaphore
	holders map[*primLock]time.Time
	writer  *primLock // read-write lock: the exclusive holder, also in holders
	queue   []*primWaiter
}

// primWaiter is one queued acquire.
type primWaiter struct {
	shared  bool
	ttl     time.Duration
	granted chan *primLock // buffered
	holder  *driver.Holder
	since   time.Time // when it queued
	id      uint64
}

// primLock is one grant of a primitive.
type primLock struct {
	s         *Store
	key       string
	p         *prim
	token     uint64
	validFrom time.Time
	shared    bool
	holder    *driver.Holder
}

func (d *memDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.s.primLock(ctx, key, kindSemaphore, limit, true, ttl, false)
}

func (d *memDriver) LockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return d.s.primLock(ctx, key, kindSemaphore, limit, true, ttl, true)
}

func (d *memDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.s.primLock(ctx, key, kindRW, 0, shared, ttl, false)
}

func (d *memDriver) LockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	return d.s.primLock(ctx, key, kindRW, 0, shared, ttl, true)
}

func wakeName(kind primKind, key string) string {
	if kind == kindSemaphore {
		return driver.SemaphoreWake(key)
	}
	return driver.RWWake(key)
}

// primLock takes key's primitive of kind (or waits for it in the queue, with wait).
func (s *Store) primLock(ctx context.Context, key string, kind primKind, limit int, shared bool, ttl time.Duration, wait bool) (driver.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	p, err := s.primFor(key, kind, limit, now)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if len(p.queue) == 0 && p.grantable(shared) {
		lk := s.primGrant(key, p, shared, ttl, holderOf(ctx), now)
		s.mu.Unlock()
		return lk, nil
	}
	if !wait {
		rem := p.remaining(now)
		s.mu.Unlock()
		return nil, driver.Busy(rem)
	}
	s.waiters++
	w := &primWaiter{shared: shared, ttl: ttl, granted: make(chan *primLock, 1), holder: holderOf(ctx), since: now, id: s.waiters}
	p.queue = append(p.queue, w)
	next := p.remaining(now)
	s.mu.Unlock()
	expiry := time.NewTimer(max(next, recheck))
	defer expiry.Stop()
	for {
		select {
		case lk := <-w.granted:
			return lk, nil
		case <-expiry.C:
			// A holder may have expired without releasing: hand on what it held.
			now := time.Now()
			s.mu.Lock()
			s.primExpire(key, p, now)
			next := p.remaining(now)
			s.mu.Unlock()
			expiry.Reset(max(next, recheck))
		case <-ctx.Done():
			s.mu.Lock()
			defer s.mu.Unlock()
			select {
			case lk := <-w.granted: // granted meanwhile: hand it on
				s.primFree(lk, time.Now())
			default:
				p.dequeue(w)
				s.primPromote(key, p, time.Now()) // we may have kept others out
			}
			return nil, ctx.Err()
		}
	}
}

// recheck is how soon a waiter looks again at holders' expiry when it knew of none.
const recheck = 10 * time.Millisecond

// primFor returns key's primitive for kind and limit, creating it or taking it over
// when it has neither holder nor waiter; ErrConflict when it is in use as another
// kind or limit. The caller holds s.mu.
func (s *Store) primFor(key string, kind primKind, limit int, now time.Time) (*prim, error) {
	p := s.prims[key]
	if p != nil {
		s.primExpire(key, p, now)
	}
	if p == nil || len(p.holders) == 0 && len(p.queue) == 0 {
		p = &prim{kind: kind, limit: limit, holders: map[*primLock]time.Time{}}
		s.prims[key] = p
		return p, nil
	}
	switch {
	case p.kind != kind:
		return nil, fmt.Errorf("%w: %q is in use as a %s", dlock.ErrConflict, key, p.kind)
	case p.limit != limit:
		return nil, fmt.Errorf("%w: %q is in use as a semaphore with limit %d, not %d", dlock.ErrConflict, key, p.limit, limit)
	}
	return p, nil
}

func (p *prim) grantable(shared bool) bool {
	switch {
	case p.kind == kindSemaphore:
		return len(p.holders) < p.limit
	case shared:
		return p.writer == nil
	}
	return len(p.holders) == 0
}

// remaining is how long until the first holder expires (0 with none).
func (p *prim) remaining(now time.Time) time.Duration {
	var first time.Time
	for _, exp := range p.holders {
		if first.IsZero() || exp.Before(first) {
			first = exp
		}
	}
	if first.IsZero() {
		return 0
	}
	return max(first.Sub(now), time.Millisecond)
}

func (p *prim) dequeue(w *primWaiter) {
	for i, x := range p.queue {
		if x == w {
			p.queue = append(p.queue[:i:i], p.queue[i+1:]...)
			return
		}
	}
}

// primGrant makes a new holder; the caller holds s.mu.
func (s *Store) primGrant(key string, p *prim, shared bool, ttl time.Duration, holder *driver.Holder, now time.Time) *primLock {
	s.token++
	lk := &primLock{s: s, key: key, p: p, token: s.token, validFrom: now, shared: shared, holder: holder}
	p.holders[lk] = now.Add(ttl)
	if p.kind == kindRW && !shared {
		p.writer = lk
	}
	return lk
}

// primExpire drops the holders past their expiry and hands on; the caller holds s.mu.
func (s *Store) primExpire(key string, p *prim, now time.Time) {
	expired := false
	for lk, exp := range p.holders {
		if !now.Before(exp) {
			s.primDrop(lk)
			expired = true
		}
	}
	if expired {
		s.primPromote(key, p, now)
	}
}

// primDrop removes lk from its primitive's holders; the caller holds s.mu.
func (s *Store) primDrop(lk *primLock) {
	delete(lk.p.holders, lk)
	if lk.p.writer == lk {
		lk.p.writer = nil
	}
}

// primFree ends lk and hands on; the caller holds s.mu.
func (s *Store) primFree(lk *primLock, now time.Time) {
	s.primDrop(lk)
	s.primPromote(lk.key, lk.p, now)
}

// primPromote grants the waiters at the head of the queue while they are
// grantable, then wakes the pollers; it forgets a primitive left empty. The
// caller holds s.mu.
func (s *Store) primPromote(key string, p *prim, now time.Time) {
	for len(p.queue) > 0 && p.grantable(p.queue[0].shared) {
		w := p.queue[0]
		p.queue = p.queue[1:]
		w.granted <- s.primGrant(key, p, w.shared, w.ttl, w.holder, now)
	}
	s.wakePollers(wakeName(p.kind, key))
	if len(p.holders) == 0 && len(p.queue) == 0 && s.prims[key] == p {
		delete(s.prims, key)
	}
}

func (l *primLock) Token() uint64 { return l.token }

// ValidFrom is when the store started the lock's TTL (driver.ValidFrom).
func (l *primLock) ValidFrom() time.Time { return l.validFrom }

func (l *primLock) Refresh(ctx context.Context, ttl time.Duration) error {
	now := time.Now()
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	exp, ok := l.p.holders[l]
	if !ok || !now.Before(exp) {
		return dlock.ErrNotHeld
	}
	l.p.holders[l] = now.Add(ttl)
	return nil
}

func (l *primLock) Unlock(ctx context.Context) error {
	now := time.Now()
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	exp, ok := l.p.holders[l]
	if !ok {
		return dlock.ErrNotHeld
	}
	l.s.primFree(l, now)
	if !now.Before(exp) {
		return dlock.ErrNotHeld
	}
	return nil
}
