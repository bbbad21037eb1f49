// Package memlock is the in-process reference backend: locks live in a Store in this
// process's memory. It has every feature of the API (per-lease TTL, refresh, fencing
// tokens, waiters woken on release) and none of the faults of a network, so it runs
// the conformance suite in a second and serves examples and tests of code that uses
// dlock. It is not distributed: two processes never share a Store.
//
// The scheme "mem://" opens a Locker on the process-wide default Store.
package memlock

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Scheme is the URL scheme this package registers with dlock.Open.
const Scheme = "mem"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if u.Host != "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("%w: mem:// takes no host or path, got %q", dlock.ErrInvalidURL, u.String())
		}
		if err := dlock.CheckQuery(u); err != nil {
			return nil, err
		}
		return New(), nil
	})
}

// Store is one lock space. Lockers on the same Store exclude each other; Lockers on
// different Stores never do. The zero value is not usable; call NewStore.
type Store struct {
	mu      sync.Mutex
	locks   map[string]*entry
	waiters map[string]map[chan struct{}]struct{}
	token   uint64 // last token handed out; one counter for all keys keeps each key's tokens increasing
}

type entry struct {
	owner   *memLock
	expires time.Time // monotonic
}

// NewStore returns an empty lock space.
func NewStore() *Store {
	return &Store{locks: map[string]*entry{}, waiters: map[string]map[chan struct{}]struct{}{}}
}

var defaultStore = NewStore()

// DefaultStore is the process-wide Store used by New without WithStore and by mem://.
func DefaultStore() *Store { return defaultStore }

// Option configures New.
type Option func(*config)

type config struct{ store *Store }

// WithStore makes the Locker use s instead of the default Store.
func WithStore(s *Store) Option { return func(c *config) { c.store = s } }

// New returns a Locker on the default Store (or the one given with WithStore).
func New(opts ...Option) dlock.Locker {
	c := config{store: defaultStore}
	for _, o := range opts {
		o(&c)
	}
	return dlock.New(&memDriver{s: c.store}, driver.Info{Name: "mem"})
}

// Delete removes key's lock whoever holds it, as an operator deleting a lock by hand
// would. Its holder finds out at its next refresh or release (ErrNotHeld) and an
// auto-renewed lease ends with ErrLost. It reports whether a live lock was removed.
func (s *Store) Delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.locks[key]
	if !ok {
		return false
	}
	delete(s.locks, key)
	s.wake(key)
	return time.Now().Before(e.expires)
}

// wake tells key's waiters it may be free; the caller holds s.mu.
func (s *Store) wake(key string) {
	for ch := range s.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

type memDriver struct{ s *Store }

func (d *memDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.locks[key]; ok && now.Before(e.expires) {
		return nil, driver.Busy(e.expires.Sub(now))
	}
	s.token++
	lk := &memLock{s: s, key: key, token: s.token}
	s.locks[key] = &entry{owner: lk, expires: now.Add(ttl)}
	return lk, nil
}

func (d *memDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	s := d.s
	s.mu.Lock()
	if s.waiters[key] == nil {
		s.waiters[key] = map[chan struct{}]struct{}{}
	}
	s.waiters[key][ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.waiters[key], ch)
		if len(s.waiters[key]) == 0 {
			delete(s.waiters, key)
		}
		s.mu.Unlock()
	}, nil
}

func (d *memDriver) Close() error { return nil }

// memLock is one grant; its identity is the owner value.
type memLock struct {
	s     *Store
	key   string
	token uint64
}

func (l *memLock) Token() uint64 { return l.token }

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
		if e, ok := l.s.locks[l.key]; ok && e.owner == l { // ours but expired: tidy up
			delete(l.s.locks, l.key)
		}
		return err
	}
	delete(l.s.locks, l.key)
	l.s.wake(l.key)
	return nil
}
