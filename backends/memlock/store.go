package memlock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Store is one lock space. Lockers on the same Store exclude each other; Lockers on
// different Stores never do. The zero value is not usable; call NewStore.
//
// Waiting Acquires queue per key and are granted the lock in arrival order: a
// release (or the holder's expiry, or Delete) hands it straight to the first
// waiter, so a client that releases and asks again goes behind those waiting, and
// TryAcquire fails while anyone waits.
type Store struct {
	mu      sync.Mutex
	locks   map[string]*entry
	queues  map[string][]*waiter                  // per key, in arrival order
	pollers map[string]map[chan struct{}]struct{} // Acquires with a retry strategy, woken when key frees
	token   uint64                                // last token handed out; one counter for all keys keeps each key's tokens increasing
	waiters uint64                                // last waiter id handed out (describe.go names waiters by it)
	terms   map[string]*terms                     // per election name (election.go)
	reaped  time.Time                             // when expired entries were last reaped
	prims   map[string]*prim                      // semaphores and read-write locks (primitives.go)
}

// reapEvery is how often a grant reaps the entries of expired, unreleased locks: the
// Store keeps at most a second's worth of them, at a cost of one pass over its
// entries a second.
const reapEvery = time.Second

type entry struct {
	owner   *memLock
	expires time.Time // monotonic
}

// waiter is one queued Acquire.
type waiter struct {
	ttl     time.Duration
	granted chan *memLock // receives the lock handed over; buffered
	holder  *driver.Holder
	since   time.Time // when it queued
	id      uint64
	// term, for a candidate (Campaign), begins its term as it is granted.
	term func(*memLock)
}

// NewStore returns an empty lock space.
func NewStore() *Store {
	return &Store{locks: map[string]*entry{}, queues: map[string][]*waiter{}, pollers: map[string]map[chan struct{}]struct{}{},
		prims: map[string]*prim{}, terms: map[string]*terms{}}
}

// Delete removes key's lock whoever holds it, as an operator deleting a lock by hand
// would (the first waiter, if any, gets it). Its holder finds out at its next
// refresh or release (ErrNotHeld) and an auto-renewed lease ends with ErrLost. It
// reports whether a live lock was removed.
func (s *Store) Delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.locks[key]
	if !ok {
		return false
	}
	now := time.Now()
	s.free(key, now)
	return now.Before(e.expires)
}

// Waiting reports how many Acquires are queued for key.
func (s *Store) Waiting(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[key])
}

// Candidates reports how many Campaigns wait for election name's term.
func (s *Store) Candidates(name string) int { return s.Waiting(electionKey(name)) }

// held returns key's live lock, if any; the caller holds s.mu.
func (s *Store) held(key string, now time.Time) (*entry, bool) {
	e, ok := s.locks[key]
	return e, ok && now.Before(e.expires)
}

// grant gives key to a new owner for ttl from now; the caller holds s.mu.
func (s *Store) grant(key string, ttl time.Duration, holder *driver.Holder, now time.Time) *memLock {
	if now.Sub(s.reaped) >= reapEvery {
		s.reap(now)
	}
	s.token++
	lk := &memLock{s: s, key: key, token: s.token, validFrom: now, holder: holder}
	s.locks[key] = &entry{owner: lk, expires: now.Add(ttl)}
	return lk
}

// reap deletes the entries of expired locks nobody waits for, and the records of
// elections left with neither a live term nor an observer; the caller holds s.mu.
// (A key with waiters is handed on by its waiters' expiry timers instead.)
func (s *Store) reap(now time.Time) {
	s.reaped = now
	for key, e := range s.locks {
		if !now.Before(e.expires) && len(s.queues[key]) == 0 {
			delete(s.locks, key)
		}
	}
	for name := range s.terms {
		s.prune(name, now)
	}
}

// Size reports how many lock entries the Store keeps: the live locks, and those
// expired without a release that it has not reaped yet (it reaps them at most a
// second after they expire, on the next grant).
func (s *Store) Size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.locks)
}

// free ends key's current lock: the first waiter gets key, else it is deleted. It
// reports whether a waiter got it; the caller holds s.mu.
func (s *Store) free(key string, now time.Time) bool {
	q := s.queues[key]
	if len(q) == 0 {
		delete(s.locks, key)
		s.wakePollers(key) // free: wake the Acquires that retry
		return false
	}
	w := q[0]
	s.dequeue(key, w)
	lk := s.grant(key, w.ttl, w.holder, now)
	if w.term != nil {
		w.term(lk)
	}
	w.granted <- lk
	return true
}

// wakePollers wakes the Acquires with a retry strategy subscribed to name; the
// caller holds s.mu.
func (s *Store) wakePollers(name string) {
	for ch := range s.pollers[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// dequeue takes w out of key's queue; the caller holds s.mu.
func (s *Store) dequeue(key string, w *waiter) {
	q := s.queues[key]
	for i, x := range q {
		if x == w {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(s.queues, key)
	} else {
		s.queues[key] = q
	}
}

type memDriver struct{ s *Store }

var (
	_ driver.Waiter   = (*memDriver)(nil)
	_ driver.Notifier = (*memDriver)(nil)
)

// Subscribe wakes an Acquire that retries with a strategy (WithRetry) when key frees.
func (d *memDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	s := d.s
	s.mu.Lock()
	if s.pollers[key] == nil {
		s.pollers[key] = map[chan struct{}]struct{}{}
	}
	s.pollers[key][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.pollers[key], ch)
		if len(s.pollers[key]) == 0 {
			delete(s.pollers, key)
		}
		s.mu.Unlock()
	}, nil
}

// TryLock takes key if it is free and nobody waits for it.
func (d *memDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	return d.s.try(key, ttl, holderOf(ctx), time.Now())
}

// holderOf returns the holder record ctx carries (dlock.WithHolder), nil if none.
func holderOf(ctx context.Context) *driver.Holder {
	if h, ok := driver.HolderFrom(ctx); ok {
		return &h
	}
	return nil
}

// try grants key if it is free and nobody waits for it; the caller holds s.mu.
func (s *Store) try(key string, ttl time.Duration, holder *driver.Holder, now time.Time) (*memLock, error) {
	if e, ok := s.held(key, now); ok {
		return nil, driver.Busy(e.expires.Sub(now))
	}
	if _, ok := s.locks[key]; ok && s.free(key, now) { // expired: the first waiter's turn
		return nil, driver.Busy(0)
	}
	if len(s.queues[key]) > 0 {
		return nil, driver.Busy(0)
	}
	return s.grant(key, ttl, holder, now), nil
}

// Lock takes key, queueing behind earlier waiters, until ctx ends (dlock cancels it
// when the Locker closes). A holder that neither releases nor refreshes loses key at its expiry,
// which the waiters watch for.
func (d *memDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return d.wait(ctx, key, ttl, nil)
}

// wait is Lock, for a candidate too: term, when not nil, is called under s.mu with
// the lock as it is granted (at once or when key is handed on).
func (d *memDriver) wait(ctx context.Context, key string, ttl time.Duration, term func(*memLock)) (driver.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s
	now := time.Now()
	s.mu.Lock()
	lk, err := s.try(key, ttl, holderOf(ctx), now)
	if err == nil {
		if term != nil {
			term(lk)
		}
		s.mu.Unlock()
		return lk, nil
	}
	s.waiters++
	w := &waiter{ttl: ttl, granted: make(chan *memLock, 1), holder: holderOf(ctx), since: now, id: s.waiters, term: term}
	s.queues[key] = append(s.queues[key], w)
	wake := time.Duration(0)
	if e, ok := s.held(key, now); ok {
		wake = e.expires.Sub(now)
	}
	s.mu.Unlock()
	expiry := time.NewTimer(wake)
	defer expiry.Stop()
	for {
		select {
		case lk := <-w.granted:
			return lk, nil
		case <-expiry.C:
			// The holder may have expired without releasing: hand key on (to the
			// first waiter, maybe us), or wait until it would expire.
			now := time.Now()
			s.mu.Lock()
			if e, ok := s.held(key, now); ok {
				expiry.Reset(e.expires.Sub(now))
			} else if _, ok := s.locks[key]; ok && len(w.granted) == 0 {
				s.free(key, now)
			}
			s.mu.Unlock()
		case <-ctx.Done():
			return nil, d.leave(key, w, ctx.Err())
		}
	}
}

// leave takes w out of key's queue, handing on a lock given to it meanwhile, and
// returns err.
func (d *memDriver) leave(key string, w *waiter, err error) error {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case lk := <-w.granted:
		if e, ok := s.locks[key]; ok && e.owner == lk {
			s.free(key, time.Now())
		}
	default:
		s.dequeue(key, w)
	}
	return err
}

// Close has nothing to release: the Store outlives its Lockers.
func (d *memDriver) Close() error { return nil }

// memLock is one grant; its identity is the owner value.
type memLock struct {
	s         *Store
	key       string
	token     uint64
	validFrom time.Time // when the store set its TTL: later than the request for a queued waiter
	holder    *driver.Holder
}

func (l *memLock) Token() uint64 { return l.token }

// ValidFrom is when the store started the lock's TTL (driver.ValidFrom).
func (l *memLock) ValidFrom() time.Time { return l.validFrom }

// own returns key's entry if it is still this grant's and not expired; the caller
// holds s.mu.
func (l *memLock) own(now time.Time) (*entry, error) {
	e, ok := l.s.locks[l.key]
	if !ok || e.owner != l || !now.Before(e.expires) {
		return nil, dlock.ErrNotHeld
	}
	return e, nil
}

func (l *memLock) Refresh(ctx context.Context, ttl time.Duration) error {
	now := time.Now()
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	e, err := l.own(now)
	if err != nil {
		return err
	}
	e.expires = now.Add(ttl)
	return nil
}

func (l *memLock) Unlock(ctx context.Context) error {
	now := time.Now()
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if _, err := l.own(now); err != nil {
		if e, ok := l.s.locks[l.key]; ok && e.owner == l { // ours but expired: hand it on
			l.s.free(l.key, now)
		}
		return err
	}
	l.s.free(l.key, now)
	if name, ok := strings.CutPrefix(l.key, electionPrefix); ok {
		l.s.prune(name, now) // a resignation: the election may have gone quiet
	}
	return nil
}
