// Package memlock is the in-process reference backend: locks live in a Store in this
// process's memory. It has every feature of the API (per-lease TTL, refresh, fencing
// tokens, waiters woken on release) and none of the faults of a network, so it runs
// the conformance suite in a second and serves examples and tests of code that uses
// dlock. It is not distributed: two processes never share a Store.
//
// The scheme "mem://" opens a Locker on the process-wide default Store.
package memlock

import (
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

var defaultStore = NewStore()

// ProcessStore is the process-wide Store used by New without WithStore and by mem://.
func ProcessStore() *Store { return defaultStore }

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
	return dlock.New(NewDriver(c.store), driver.Info{Name: "mem"})
}

// NewDriver returns the driver New runs under dlock.New, on s: for a backend that
// wraps memlock's store with behaviour of its own (package dlocktest adds faults).
// It implements driver.Waiter, driver.Notifier, driver.Semaphorer,
// driver.SemaphoreWaiter, driver.RWLocker, driver.RWWaiter, driver.Elector and
// driver.CampaignNotifier; its locks implement driver.ValidFrom. dlock.New(NewDriver(s),
// driver.Info{Name: "mem"}) is what New(WithStore(s)) returns.
func NewDriver(s *Store) driver.Driver { return &memDriver{s: s} }
