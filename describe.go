package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"
)

// Inspection of what a store holds: Describe and List. (Inspect, in open.go, is
// another thing: the check of a deployment's configuration.)

// KeyState is what the store holds for one primitive on one key: its holders, its
// waiters where the store queues them, a semaphore's limit (see driver.KeyState for
// each field).
type KeyState = driver.KeyState

// Entry is one holder or waiter as the store sees it: its owner, token, since when,
// time left, address, and the Holder record its client wrote (see driver.Entry).
type Entry = driver.Entry

// Kind says which primitive a KeyState describes: KindLock, KindSemaphore,
// KindRWLock or KindElection.
type Kind = driver.Kind

// The kinds of KeyState.
const (
	KindLock      = driver.KindLock
	KindSemaphore = driver.KindSemaphore
	KindRWLock    = driver.KindRWLock
	KindElection  = driver.KindElection
)

// Holder is what a client records about itself with a lock it takes (WithHolder):
// its host, process id and a name, and — set by dlock — when it asked. Describe
// and List show it beside the store's own view of the holder.
type Holder = driver.Holder

// ErrInvalidHolder: a Holder given to WithHolder has a Host or Name longer than
// MaxHolderLen bytes or not valid UTF-8, or a negative PID.
var ErrInvalidHolder = errors.New("dlock: invalid holder")

// MaxHolderLen is the longest Host and the longest Name of a Holder, in bytes.
const MaxHolderLen = 255

// WithHolder records h with the lock (or permit, or shared lease) this call takes,
// where the store can keep it: in the lock's own value or node — Redis (with
// WithFIFO its waiters' too), Redlock, etcd and ZooKeeper (their waiters' too),
// mem, Redis and ZooKeeper semaphores and read-write locks — written by the
// request that takes or queues the lock, so that it costs no round trip; MySQL's
// table keeps a lock's in a side table (mysqllock.OwnersTable) written after the
// grant, in the background, and so does PostgreSQL's (pglock.OwnersTable).
// GET_LOCK, PostgreSQL's advisory locks, etcd's semaphores and read-write locks, and
// elections keep none (an election's value is its record). dlock sets h.Since to
// when each request is sent. The call fails with ErrInvalidHolder for a Holder that is not
// valid (see there).
//
// Not guaranteed: the record is what the client said; nothing checks it, and two
// clients may record the same. Keep secrets out of it: anyone who can read the
// store can read it.
func WithHolder(h Holder) Option {
	return func(o *AcquireOptions) { o.Holder = h }
}

// ThisProcess returns a Holder naming this process: its host name (os.Hostname,
// empty if unknown), its process id, and name.
func ThisProcess(name string) Holder {
	host, _ := os.Hostname()
	return Holder{Host: host, PID: os.Getpid(), Name: name}
}

// validateHolder returns nil for a usable Holder and an error wrapping
// ErrInvalidHolder otherwise.
func validateHolder(h Holder) error {
	for _, f := range []struct{ name, v string }{{"host", h.Host}, {"name", h.Name}} {
		switch {
		case len(f.v) > MaxHolderLen:
			return fmt.Errorf("%w: %s of %d bytes, the limit is %d", ErrInvalidHolder, f.name, len(f.v), MaxHolderLen)
		case !utf8.ValidString(f.v):
			return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidHolder, f.name)
		}
	}
	if h.PID < 0 {
		return fmt.Errorf("%w: pid %d", ErrInvalidHolder, h.PID)
	}
	return nil
}

// Describe reads what the store of l's backend holds on key: for its lock, its
// semaphore, its read-write lock and the election of that name, each that has a
// holder or a waiter, who holds it (the store's owner, the fencing token, since
// when, time left, the Holder record its client wrote), who waits where the store
// queues waiters, and a semaphore's limit. None when nothing holds or waits on
// key. It takes no lock and changes nothing.
//
// It returns ErrInvalidKey for a bad key, ErrClosed after l's Close, an error
// wrapping errors.ErrUnsupported for a backend that cannot be read this way (and
// for a Locker not made by New nor unwrapping to one), and the store's error,
// wrapped.
//
// Not guaranteed: the states are a read, not a snapshot of one instant on every
// backend (a primitive's state and another's, or a Redlock master and the next, are
// read one after the other); a holder shown may have released since, and one whose
// lease the store still counts may already have stopped working. Each backend's
// documentation says what its store keeps (docs/inspect.md).
func Describe(ctx context.Context, l Locker, key string) ([]KeyState, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	return describe(ctx, l, "describe "+fmt.Sprintf("%q", key), func(d driver.Describer) ([]KeyState, error) {
		return d.Describe(ctx, key)
	})
}

// List reads, as Describe does, every key whose name begins with prefix ("" for
// every key) that the store of l's backend holds or queues for, sorted by key and
// kind. Errors are Describe's; an error wrapping errors.ErrUnsupported also comes
// from a store that cannot enumerate its locks (it says why), and ErrInvalidKey
// for a prefix that is not valid UTF-8 or longer than MaxKeyLen bytes.
//
// Not guaranteed: as for Describe; and a key taken while List reads may be missed.
func List(ctx context.Context, l Locker, prefix string) ([]KeyState, error) {
	if len(prefix) > MaxKeyLen || !utf8.ValidString(prefix) {
		return nil, fmt.Errorf("%w: prefix of %d bytes (at most %d of valid UTF-8)", ErrInvalidKey, len(prefix), MaxKeyLen)
	}
	return describe(ctx, l, "list "+fmt.Sprintf("%q", prefix), func(d driver.Describer) ([]KeyState, error) {
		return d.List(ctx, prefix)
	})
}

// describe runs read on l's driver and puts what it returned in order.
func describe(ctx context.Context, l Locker, what string, read func(driver.Describer) ([]KeyState, error)) ([]KeyState, error) {
	c, _, err := primitiveCore(l, "inspection")
	if err != nil {
		return nil, err
	}
	d, ok := c.d.(driver.Describer)
	if !ok {
		return nil, fmt.Errorf("dlock: the %s backend cannot describe its locks: %w", c.info.Name, errors.ErrUnsupported)
	}
	if !c.enter() {
		return nil, ErrClosed
	}
	defer c.leave()
	states, err := read(d)
	if err != nil {
		return nil, fmt.Errorf("dlock: %s: %s: %w", c.info.Name, what, err)
	}
	for _, s := range states {
		if !slices.ContainsFunc(s.Holders, func(e Entry) bool { return e.Token == 0 }) {
			slices.SortStableFunc(s.Holders, func(a, b Entry) int { return cmp.Compare(a.Token, b.Token) })
		}
	}
	slices.SortStableFunc(states, func(a, b KeyState) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)))
	})
	return states, nil
}

func kindOrder(k Kind) int {
	return slices.Index([]Kind{KindLock, KindSemaphore, KindRWLock, KindElection}, k)
}
