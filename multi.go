package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// MaxSetKeys is the largest number of distinct keys AcquireAll takes at once.
const MaxSetKeys = 64

// AcquireAll blocks until it holds every one of keys at once, ctx is done, or the
// backend fails: all or nothing. The keys are the same locks a mutex on each key
// takes (a set {a, b} and l.Acquire(ctx, "a") exclude each other). The Lease it
// returns is a *SetLease for the set: its Key is SetKey(keys), Done closes when any
// one key is lost, Release and Refresh act on every key. It takes the options of
// Acquire (TTL, retry, auto-renewal, observer; an Instrument wrapper's Observer
// applies).
//
// How: where the backend takes a set in one step (driver.MultiLocker: one Redis
// script, one etcd transaction, one SQL statement) each attempt is that step;
// elsewhere an attempt takes the keys one by one in sorted order and gives back
// those it took as soon as one is busy. A waiting AcquireAll never holds a key
// while it waits for another, so sets that overlap cannot deadlock. Where the
// backend queues a set in the queue of every one of its keys at once
// (driver.MultiWaiter: Redis, for keys of one hash slot) the set waits there, and
// is passed over no longer than a waiter of one key is. On another backend that
// queues waiters it waits in the queue of the key it found busy, then tries the
// others; elsewhere it retries by the retry strategy. Not guaranteed there: a
// place in any queue (a set may be overtaken by single-key waiters for as long as
// one of its keys is held), and an order among sets.
//
// Errors: as for Locker.Acquire, and ErrInvalidKey for an empty list, more than
// MaxSetKeys distinct keys, or an invalid key (the error names it); duplicate keys
// count once. errors.ErrUnsupported when l was not made by New (or does not unwrap
// to such a Locker: see Unwrapper).
func AcquireAll(ctx context.Context, l Locker, keys []string, opts ...Option) (Lease, error) {
	return acquireSet(ctx, l, keys, true, opts)
}

// TryAcquireAll makes one all-or-nothing attempt to take every one of keys:
// ErrNotAcquired, holding none of them, when one is held. Otherwise as AcquireAll.
func TryAcquireAll(ctx context.Context, l Locker, keys []string, opts ...Option) (Lease, error) {
	return acquireSet(ctx, l, keys, false, opts)
}

// SetLease is the Lease that AcquireAll and TryAcquireAll return.
//
// Token is the largest of the keys' tokens. Where a backend's tokens come from one
// counter for all keys (mem, etcd, ZooKeeper) it fences every key of the set; where
// each key counts its own (Redis, MySQL) a resource that protects one key must
// check that key's token: TokenOf.
type SetLease struct {
	Lease
	keys   []string
	tokens []uint64
}

// Keys returns the set's keys, sorted and distinct.
func (s *SetLease) Keys() []string { return slices.Clone(s.keys) }

// TokenOf returns the fencing token of key in this grant (0 if key is not in the
// set, or the backend cannot fence).
func (s *SetLease) TokenOf(key string) uint64 {
	if i, ok := slices.BinarySearch(s.keys, key); ok && i < len(s.tokens) {
		return s.tokens[i]
	}
	return 0
}

// SetKey names a set of keys, as the Key of its SetLease: the distinct keys in
// sorted order, each quoted as a Go string literal (strconv.Quote), separated by
// single spaces, e.g. `"a" "b/c"`. Two different sets have two different names.
func SetKey(keys []string) string {
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	q := make([]string, len(ks))
	for i, k := range ks {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, " ")
}

// setOf returns keys validated, sorted and without duplicates.
func setOf(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys in the set", ErrInvalidKey)
	}
	for i, k := range keys {
		if err := ValidateKey(k); err != nil {
			return nil, fmt.Errorf("key %d of the set: %w", i, err)
		}
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	if len(ks) > MaxSetKeys {
		return nil, fmt.Errorf("%w: %d distinct keys in the set, the limit is %d", ErrInvalidKey, len(ks), MaxSetKeys)
	}
	return ks, nil
}

func acquireSet(ctx context.Context, l Locker, keys []string, wait bool, opts []Option) (Lease, error) {
	c, obs, ok := core(l)
	if !ok {
		return nil, fmt.Errorf("dlock: locks on a set of keys need a Locker made by dlock.New (%T does not unwrap to one): %w", l, errors.ErrUnsupported)
	}
	ks, err := setOf(keys)
	if err != nil {
		return nil, err
	}
	if obs != nil {
		opts = append([]Option{WithObserver(obs)}, opts...)
	}
	ls, err := c.acquire(ctx, c.setRequest(ks), wait, opts)
	if err != nil {
		return nil, err
	}
	s := &SetLease{Lease: ls, keys: ks}
	if x, ok := ls.(*lease); ok {
		if sl, ok := x.lk.(driver.SetLock); ok {
			s.tokens = sl.Tokens()
		}
		tracked := c.enter() // Close waits for the give-back; it ends the lease first
		go c.endSet(x, tracked)
	}
	return s, nil
}

// endSet waits for a set lease to end. A set lost by one key gives the others back
// at once (owner-checked), rather than leave them held to their TTL or session's
// end. The give-back takes the lease's operation slot, as Refresh and Release do: a
// renewal or a Refresh still on its way when the lease ended (at its deadline) may
// be writing the lock. tracked: the call was registered with enter (Close had not
// begun), so it may use the driver.
func (l *locker) endSet(ls *lease, tracked bool) {
	<-ls.done
	if tracked {
		if errors.Is(ls.Err(), ErrLost) {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			if ls.acquireOp(ctx) == nil {
				_ = ls.lk.Unlock(ctx)
				ls.releaseOp()
			}
			cancel()
		}
		l.leave()
	}
	if sl, ok := ls.lk.(*setLock); ok {
		sl.stopWatching()
	}
}

// setRequest is the request of AcquireAll and TryAcquireAll for the sorted,
// distinct keys ks.
func (l *locker) setRequest(ks []string) request {
	r := request{key: SetKey(ks), checked: true,
		try: func(ctx context.Context, ttl time.Duration) (driver.Lock, error) { return l.trySet(ctx, ks, ttl) }}
	if l.waiter != nil {
		r.wait = func(ctx context.Context, ttl time.Duration) (driver.Lock, error) { return l.waitSet(ctx, ks, ttl) }
	}
	return r
}

// trySet makes one all-or-nothing attempt: the driver's own step if it has one for
// this set, else the keys one by one.
func (l *locker) trySet(ctx context.Context, ks []string, ttl time.Duration) (driver.Lock, error) {
	if ml, ok := l.d.(driver.MultiLocker); ok {
		lk, err := ml.TryLockAll(ctx, ks, ttl)
		if !errors.Is(err, errors.ErrUnsupported) {
			return lk, err
		}
	}
	lk, _, err := l.trySetByKey(ctx, ks, -1, setPart{}, ttl)
	return lk, err
}

// setPart is one key's lock in a set, and when its TTL started (at the latest).
type setPart struct {
	lk   driver.Lock
	from time.Time
}

// trySetByKey takes the keys ks one by one in order, except ks[have] whose lock
// the caller holds already (have < 0: none). When one is busy (or fails) it gives
// back every lock it holds, have's included, and returns the index of that key.
func (l *locker) trySetByKey(ctx context.Context, ks []string, have int, held setPart, ttl time.Duration) (driver.Lock, int, error) {
	parts := make([]setPart, len(ks))
	for i, k := range ks {
		if i == have {
			parts[i] = held
			continue
		}
		t0 := time.Now()
		lk, err := l.d.TryLock(ctx, k, ttl)
		if err != nil {
			if have >= 0 && i < have {
				parts[have] = held
			}
			for _, p := range parts {
				if p.lk != nil {
					l.giveBack(p.lk)
				}
			}
			return nil, i, err
		}
		parts[i] = setPart{lk, validFrom(lk, t0)}
	}
	return newSetLock(parts), -1, nil
}

// waitSet takes the set on a driver that queues waiters: in the queues of every
// key at once where the driver can (driver.MultiWaiter); otherwise it waits in the
// queue of one key (the first, then the one found busy), holding nothing else,
// then tries the others, and when one of them is busy it gives everything back and
// waits for that one.
func (l *locker) waitSet(ctx context.Context, ks []string, ttl time.Duration) (driver.Lock, error) {
	if mw, ok := l.d.(driver.MultiWaiter); ok {
		lk, err := mw.LockAll(ctx, ks, ttl)
		if !errors.Is(err, errors.ErrUnsupported) {
			return lk, err
		}
	}
	first := 0
	for {
		t0 := time.Now()
		lk, err := l.waiter.Lock(ctx, ks[first], ttl)
		if err != nil {
			return nil, err
		}
		set, busy, err := l.trySetByKey(ctx, ks, first, setPart{lk, validFrom(lk, t0)}, ttl)
		var remaining time.Duration
		switch {
		case err == nil:
			return set, nil
		case !isBusy(err, &remaining):
			return nil, err
		}
		first = busy
	}
}

// validFrom is the later of t0 (taken before the request that granted lk) and the
// moment lk says its TTL started.
func validFrom(lk driver.Lock, t0 time.Time) time.Time {
	if vf, ok := lk.(driver.ValidFrom); ok && vf.ValidFrom().After(t0) {
		return vf.ValidFrom()
	}
	return t0
}

// setLock is a set of keys taken one by one: a driver.Lock on all of them.
type setLock struct {
	parts []setPart

	mu       sync.Mutex
	released []bool // parts whose lock is gone (unlocked, or found not ours)
	gone     bool   // a part was found not ours

	lost     chan struct{} // closed when a part's store takes it away
	lostOnce sync.Once
	cause    error
	stop     chan struct{} // closed when the lease ended: stops the watches
	stopOnce sync.Once
}

var (
	_ driver.SetLock   = (*setLock)(nil)
	_ driver.Sessioned = (*setLock)(nil)
	_ driver.ValidFrom = (*setLock)(nil)
)

func newSetLock(parts []setPart) *setLock {
	s := &setLock{parts: parts, released: make([]bool, len(parts)), lost: make(chan struct{}), stop: make(chan struct{})}
	for _, p := range parts {
		if ss, ok := p.lk.(driver.Sessioned); ok {
			go func() {
				select {
				case <-ss.Lost():
					s.lostOnce.Do(func() { s.cause = ss.Cause(); close(s.lost) })
				case <-s.stop:
				}
			}()
		}
	}
	return s
}

func (s *setLock) stopWatching() { s.stopOnce.Do(func() { close(s.stop) }) }

func (s *setLock) Token() uint64 { return slices.Max(s.Tokens()) }

func (s *setLock) Tokens() []uint64 {
	ts := make([]uint64, len(s.parts))
	for i, p := range s.parts {
		ts[i] = p.lk.Token()
	}
	return ts
}

// ValidFrom is the earliest moment one of the keys' TTL started.
func (s *setLock) ValidFrom() time.Time {
	from := s.parts[0].from
	for _, p := range s.parts[1:] {
		if p.from.Before(from) {
			from = p.from
		}
	}
	return from
}

func (s *setLock) Lost() <-chan struct{} { return s.lost }

// SessionDeadline is the earliest session deadline of the parts that have one
// (driver.SessionDeadline).
func (s *setLock) SessionDeadline() (time.Time, bool) {
	var first time.Time
	for _, p := range s.parts {
		if sd, ok := p.lk.(driver.SessionDeadline); ok {
			if d, ok := sd.SessionDeadline(); ok && (first.IsZero() || d.Before(first)) {
				first = d
			}
		}
	}
	return first, !first.IsZero()
}

func (s *setLock) Cause() error {
	select {
	case <-s.lost:
		return s.cause
	default:
		return nil
	}
}

// Refresh refreshes every key. When one is no longer ours the set is lost: every
// key is given back (that one's too: a release of it that had gone through with its
// answer lost is then known to be the owner's, where the store's release is
// idempotent) and Refresh returns ErrNotHeld.
func (s *setLock) Refresh(ctx context.Context, ttl time.Duration) error {
	for _, p := range s.parts {
		err := p.lk.Refresh(ctx, ttl)
		if errors.Is(err, ErrNotHeld) {
			_ = s.Unlock(ctx)
			return err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Unlock unlocks every key still ours. A key found not ours makes it return
// ErrNotHeld (after the others), now and on every later Unlock; another error is
// returned as is, and a later Unlock tries the keys that are left. A set whose
// keys were all released by earlier Unlocks, each found ours, returns nil again.
func (s *setLock) Unlock(ctx context.Context) error {
	var failed error
	for i, p := range s.parts {
		s.mu.Lock()
		done := s.released[i]
		s.mu.Unlock()
		if done {
			continue
		}
		err := p.lk.Unlock(ctx)
		switch {
		case err == nil || errors.Is(err, ErrNotHeld):
			s.mu.Lock()
			s.released[i] = true
			s.gone = s.gone || err != nil
			s.mu.Unlock()
		case failed == nil:
			failed = err
		}
	}
	if failed != nil {
		return failed
	}
	s.stopWatching() // no key left to watch
	s.mu.Lock()
	gone := s.gone
	s.mu.Unlock()
	if gone {
		return ErrNotHeld
	}
	return nil
}
