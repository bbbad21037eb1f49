// Package dlocktest lets a test find out what its code does when a distributed lock
// is lost, the store hangs or a renewal fails — in virtual time, without a server.
//
// A Store is a lock space for one test: memlock's in-process store behind a driver
// that injects the faults production brings, under dlock's one lease core (the same
// validation, retries, auto-renewal, validity deadline, Done/Err and Close as every
// backend). Each Client is a dlock.Locker of its own, as another process would be;
// semaphores, read-write locks, elections and AcquireAll work on it as on any
// Locker made by dlock.New.
//
// Faults, at any moment of the test:
//
//   - Store.Lose ends a lease now, with the cause production would give: deleted
//     or session ended (the store says so), expired (as at its deadline),
//     unreachable (the client gives it up while the store keeps it), or refused
//     (the store drops it without a word; the holder finds out at its next
//     refresh or release). Store.TakeOver drops a lock that way and grants it to
//     another client: the stale holder a fencing token is for.
//   - Store.Hang: the store stops answering until Resume; Client.Partition: one
//     client is cut off until Heal. Calls wait for an answer until their context
//     ends.
//   - Client.FailRefreshes, Client.LoseReplies, Client.DelayGrants: the next
//     refreshes fail, the next replies are lost after the store acted, grants
//     reach the client late.
//   - Client.Drift: the client's clock runs at another rate than the store's.
//
// What the code under test did is checked on a Resource: the thing the lock
// protects, written with the lease the code holds. Resource.Check reports two
// holders' writes that overlapped, and writes made after the writer's lease had
// ended (its Done closed) — the worker that does not stop. A fenced Resource
// refuses stale tokens, as a fencing guard does. Store.History lists what each
// client asked, what the store did with it, the faults, the leases' ends and the
// writes, in order.
//
// Inside a testing/synctest bubble everything runs on the bubble's fake clock:
// TTLs, auto-renewals, retries, expiry and the faults' waits take no wall time.
// Make the Store and its Clients inside the bubble (their channels and timers
// belong to it) and Close the Store before the bubble's function returns (or in
// t.Cleanup): a lease still renewing itself keeps the bubble's clock running.
//
//	func TestWorkerStopsWhenLeaseIsLost(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			store := dlocktest.NewStore()
//			defer store.Close()
//			a := store.Client("a")
//			db := store.NewResource("db")
//			go worker(t.Context(), a, db) // holds "job" with WithAutoRenew, writes to db
//			time.Sleep(5 * time.Second)
//			a.Partition() // renewals go unanswered: the lease ends at its deadline
//			time.Sleep(time.Minute)
//			if err := db.Check(); err != nil {
//				t.Fatal(err) // "dlocktest: db: a wrote to db 51 times from 15s to 1m5s with token 1
//				// after its lease of "job" ended at 14.848s (dlock: lease lost: unreachable: …)"
//			}
//		})
//	}
//
// TestExampleWorker in the package's example_test.go runs this test both ways:
// the worker that ignores Done fails Check, the one that honours it passes, in
// milliseconds of wall time. (Go's runnable examples cannot run in a bubble,
// which needs a *testing.T: the package's examples run in real time, on faults
// that wait for nothing.)
//
// Outside a bubble the Store runs in real time, and faults that wait for a TTL
// take that long.
//
// What is not modelled: the store's own failures beyond these (a failover that
// loses writes, a restart: the conformance suite runs those on real servers), a
// request that reaches the store after its caller gave up (a call abandoned while
// the store hangs is not run), and faults on election watches (Observe) and on
// release notifications.
package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/driver"
)

// Name is the backend's name in the errors and events of a Client's Locker:
// "dlock: dlocktest: …".
const Name = "dlocktest"

// Store is one lock space and the faults injected into it. Clients of one Store
// exclude each other; Stores never share a lock. Safe for concurrent use.
type Store struct {
	mem   *memlock.Store
	inner memDriver // memlock's driver on mem
	start time.Time

	// schedule, when set (by this package's simulation), adds a fault of its own
	// to every call.
	schedule func(c *Client, call string, key string, token uint64) fate

	mu       sync.Mutex
	clients  []*Client
	names    map[string]bool
	locks    map[uint64]*lock // every lock the store granted, by token
	hung     chan struct{}    // closed by Resume; nil while the store answers
	history  []Event
	watching sync.WaitGroup // the goroutines that record the ends of leases
	breaches []string       // promises of dlock.New to its driver that were broken
}

// NewStore returns an empty Store. Close it when the test ends. Not modelled:
// what the package documentation lists (a store's own failures beyond the faults
// here, requests that reach the store after their caller gave up).
func NewStore() *Store {
	m := memlock.NewStore()
	return &Store{mem: m, inner: memlock.NewDriver(m).(memDriver), start: time.Now(), names: map[string]bool{}, locks: map[uint64]*lock{}}
}

// Client returns a new client of the Store named name (in the History, in
// Resource.Check's reports and in the errors of faults): a dlock.Locker as
// independent of the others as another process. It panics if name is already a
// client's name.
func (s *Store) Client(name string) *Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names[name] {
		panic(fmt.Sprintf("dlocktest: the store has a client named %q already", name))
	}
	s.names[name] = true
	c := &Client{s: s, name: name, rate: 1}
	c.core = dlock.New(&clientDriver{c: c}, driver.Info{Name: Name})
	s.clients = append(s.clients, c)
	return c
}

// Close closes every client of the Store (each Client's Close: their leases end
// with ErrClosed, released where the store answers) and waits until the ends of
// the leases are in the History. A hung store is resumed first, and every
// partition healed, so that Close does not wait for answers that will not come.
// It returns the clients' Close errors, joined.
func (s *Store) Close() error {
	s.Resume()
	s.mu.Lock()
	clients := append([]*Client(nil), s.clients...)
	s.mu.Unlock()
	var errs []error
	for _, c := range clients {
		c.Heal()
		errs = append(errs, c.Close())
	}
	s.watching.Wait()
	return errors.Join(errs...)
}

// Client is one client of a Store: a dlock.Locker of its own, and the faults that
// hit only it. Its Acquire and TryAcquire (and the primitives made from it:
// dlock.NewSemaphore, NewRWMutex, NewElection, AcquireAll) hand out leases of
// dlock's lease core. Safe for concurrent use.
type Client struct {
	s    *Store
	name string
	core dlock.Locker

	mu            sync.Mutex
	cut           chan struct{} // closed by Heal; nil while the client is connected
	failRefreshes int
	loseReplies   int
	grantDelay    time.Duration
	rate          float64
	closing       time.Time                     // when Close began (zero before)
	closed        bool                          // the driver was closed
	inFlight      map[*context.Context]struct{} // the contexts of the driver's calls under way
}

var (
	_ dlock.Locker    = (*Client)(nil)
	_ dlock.Unwrapper = (*Client)(nil)
)

// Name returns the client's name.
func (c *Client) Name() string { return c.name }

// Unwrap returns the Locker underneath (dlock.Unwrapper), so that the primitives
// find it.
func (c *Client) Unwrap() dlock.Locker { return c.core }

// Acquire is dlock.Locker's Acquire on the Store, recorded in its History. Its
// errors are the Locker's (ErrNotAcquired, ErrClosed, ErrInvalidKey, …); a fault
// that failed a call to the store is wrapped in them (errors.Is(err, ErrFault)),
// and a call that met a hung store or a partition returns its context's error.
func (c *Client) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return c.acquire("Acquire", key, func() (dlock.Lease, error) { return c.core.Acquire(ctx, key, opts...) })
}

// TryAcquire is dlock.Locker's TryAcquire on the Store, recorded in its History;
// its errors are as Acquire's.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return c.acquire("TryAcquire", key, func() (dlock.Lease, error) { return c.core.TryAcquire(ctx, key, opts...) })
}

func (c *Client) acquire(what, key string, call func() (dlock.Lease, error)) (dlock.Lease, error) {
	start := time.Now()
	ls, err := call()
	e := Event{At: c.s.since(start), Took: time.Since(start), Client: c.name, What: what, Key: key, Err: errString(err)}
	if err == nil {
		e.Token = ls.Token()
	}
	c.s.record(e)
	if err == nil {
		c.s.watch(c, ls)
	}
	return ls, err
}

// Close is dlock.Locker's Close: the client's waits end, its leases end with
// ErrClosed (released where the store answers), and the calls in flight are
// waited for, as dlock.New's Close does. It is recorded in the History.
func (c *Client) Close() error {
	start := time.Now()
	c.mu.Lock()
	if c.closing.IsZero() {
		c.closing = start
	}
	c.mu.Unlock()
	err := c.core.Close()
	c.s.record(Event{At: c.s.since(start), Took: time.Since(start), Client: c.name, What: "Close", Err: errString(err)})
	return err
}

// watch records the end of a lease the Store handed out, once, when its Done
// closes.
func (s *Store) watch(c *Client, ls dlock.Lease) {
	lk := s.lockOf(ls)
	if lk == nil {
		return
	}
	lk.mu.Lock()
	watched := lk.watched
	lk.watched = true
	lk.mu.Unlock()
	if watched {
		return
	}
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		<-ls.Done()
		s.record(Event{At: s.since(endedAt(ls)), Client: c.name, What: "Done", Key: ls.Key(), Token: ls.Token(), Err: errString(ls.Err())})
	}()
}

// endedAt is when ls ended, as the lease core keeps it (its Done, or its deadline
// if it looked later), or now.
func endedAt(ls dlock.Lease) time.Time {
	if e, ok := ls.(interface{ EndedAt() time.Time }); ok {
		if at := e.EndedAt(); !at.IsZero() {
			return at
		}
	}
	return time.Now()
}

// lockOf returns the Store's lock under ls (the part with ls's token for a set of
// keys), or nil for a lease of another Store.
func (s *Store) lockOf(ls dlock.Lease) *lock {
	if ls == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks[ls.Token()]
}

func (s *Store) since(t time.Time) time.Duration { return t.Sub(s.start) }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
