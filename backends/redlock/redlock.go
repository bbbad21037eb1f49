// Package redlock is the Redlock backend of dlock: one lock over N independent Redis
// masters (no replication between them), held when a majority of them granted it.
//
// The algorithm, step by step (docs/backends/redlock.md names the test of each):
//
//  1. Acquire: send the same key and the same random 128-bit value to every master in
//     parallel (SET NX PX: set-if-absent with an expiry; refused, vote.lua reads
//     the holder's value and remaining time), each request
//     bounded by a short per-node timeout (NodeTimeout, or WithNodeTimeout).
//  2. Decide as soon as the outcome is known: held once a majority (N/2+1) granted it;
//     failed once so many masters refused or did not answer that a majority can no
//     longer be reached. A slow master is not waited for once the answer is known.
//  3. Validity: the lease is valid for TTL − elapsed − drift after the decision, with
//     drift = TTL×1% + 2ms by default (WithDrift). dlock keeps that deadline itself:
//     it starts the clock before TryLock and sets the deadline at start + TTL −
//     Drift(TTL), which is the same instant; a grant whose validity is already used up
//     is given back.
//  4. On failure: release on every master that may hold our value (those that granted,
//     and those that failed or had not answered, each after its own request ended),
//     then report the lock busy (or dlock.ErrUnavailable when more than N − quorum
//     masters could not be reached) so that the shared retry loop waits a random
//     delay (WithRetry) before the next attempt. A split vote (no value on a
//     majority) is the exception: the contender that holds the key's gate master
//     keeps its grants and claims the others' (tiebreak.go), so that one of the
//     clients that asked at the same moment gets the lock.
//  5. Refresh and Release go to every master in parallel; Refresh succeeds only when a
//     majority extended the lock within its validity, Release when a majority deleted
//     it (owner-checked: only keys holding our value are touched).
//
// An Acquire's first attempt is TryAcquire's round. Once refused, waiters queue on
// every master (Lock, in queue.go): each master keeps the waiters
// in the order of an arrival time the waiter chose, the same on every master, and a
// release tells the first waiter alone, so one waiter looks per release however
// many wait. The queue decides whom a release wakes, and bounds barging: a free lock
// goes to whoever asks first, but a woken waiter that was passed over once has the
// lock reserved for it by the next release that wakes it (for the per-node timeout;
// every other vote is refused meanwhile). An Acquire with a retry strategy (dlock.WithRetry)
// retries after its delays instead, woken by every release (Subscribe, in wake.go).
//
// Not guaranteed (see the docs page): mutual exclusion when a master restarts without
// persistence before a TTL has passed (the declared weakness, reproduced by
// TestRestartWithoutPersistenceLetsASecondClientIn), when clocks of a majority of
// masters jump, or against a holder paused past its validity. There is no fencing
// token: Token is always 0.
package redlock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/driver"
)

// Option configures New.
type Option func(*config)

type config struct {
	nodeTimeout time.Duration // 0: NodeTimeout(ttl)
	maxInFlight int
	drift       func(time.Duration) time.Duration
	ownsClients bool // Close closes the clients (URL openers)
}

// WithNodeTimeout sets a fixed per-node timeout: how long one request to one master
// may take before that master counts as unreachable for this request. d <= 0 keeps
// the default, NodeTimeout(ttl). A larger timeout costs nothing while a
// majority answers quickly (the decision does not wait for the slow ones); it makes a
// failing attempt, and dlock.ErrUnavailable, come later when masters hang.
//
// A request that goes out as soon as its round begins (a free slot, a master this
// Locker has already talked to) has the timeout from the round's start, shared
// with the round's other such requests, and at least three quarters of it left
// when it is sent; any other request has the whole timeout from the moment it is
// sent.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout = d }
}

// WithMaxInFlight sets how many requests one Locker has in flight to one master at
// a time (default DefaultMaxInFlight); further requests wait in this process, and
// their per-node timeout starts only when they are sent. A vote or refresh still
// waiting when its round is decided is not sent at all; a release waits on (see
// Unlock in lock.go) as long as the lease's key may live on that master, and goes
// at once when Close begins. n <= 0 keeps the default.
func WithMaxInFlight(n int) Option {
	return func(c *config) { c.maxInFlight = n }
}

// DefaultMaxInFlight is the default of WithMaxInFlight: two requests in flight per
// master, which keeps a burst of lock calls on a new client from dialing dozens of
// connections at once and serves thousands of calls per second at local-network
// round trips.
//
// (On a loaded 2-core machine, 64 concurrent first requests to one master took about
// 45ms each, close to the per-node timeout.)
const DefaultMaxInFlight = 2

// WithDrift sets the clock-drift allowance: a lease's validity is TTL − elapsed −
// (TTL×factor + fixed). The default is driver.StandardDrift: factor 0.01, fixed 2ms.
// The allowance covers masters whose clocks run faster than this client's; it does
// not cover clock jumps.
func WithDrift(factor float64, fixed time.Duration) Option {
	return func(c *config) {
		c.drift = func(ttl time.Duration) time.Duration {
			return time.Duration(float64(ttl)*factor) + fixed
		}
	}
}

// NodeTimeout is the per-node timeout for a lease of ttl when WithNodeTimeout
// is not given: ttl/100, at least 50ms and at most 250ms (100ms for the default 10s
// TTL). It is small against the TTL, so that an attempt that has to wait for a
// master that does not answer still leaves most of the validity, and not smaller
// than 50ms, so that a loaded machine's late answers still count.
//
// (On a 2-core machine under -race, 10ms requests to local masters timed out often
// enough to fail the conformance suite; TestNodeTimeout records the choice.)
func NodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/100, 50*time.Millisecond), 250*time.Millisecond)
}

// MinTTL is the shortest TTL New accepts.
const MinTTL = 10 * time.Millisecond

// New returns a Locker that runs Redlock over clients, one client per independent
// Redis master (see the package doc). The quorum is len(clients)/2+1. Closing the
// Locker does not close the clients.
//
// The clients must reach distinct, independent masters: two clients of the same
// server (or of a master and its replica) count twice and break the quorum. New
// panics when clients is empty or holds nil, and when two *redis.Client have the same
// address: those are programming errors.
//
// Give clients with ContextTimeoutEnabled (as the redlock:// opener does): without
// it go-redis ignores context deadlines on the socket, so a request to a master that
// stops answering outlives its per-node timeout by up to the client's ReadTimeout,
// and Release, Refresh and Close wait for it.
//
// Not guaranteed: see the package doc. Token is always 0.
func New(clients []redis.UniversalClient, opts ...Option) dlock.Locker {
	l, _ := newLocker(clients, opts)
	return l
}

// newLocker is New, also returning the driver.
func newLocker(clients []redis.UniversalClient, opts []Option) (dlock.Locker, *redlockDriver) {
	c := config{drift: driver.StandardDrift}
	for _, o := range opts {
		o(&c)
	}
	d := newDriver(clients, c)
	return dlock.New(d, driver.Info{Name: "redlock", Drift: c.drift, MinTTL: MinTTL}), d
}

// TryLockSemaphore takes a permit of the generic semaphore (package
// internal/generic): one of limit Redlock mutexes per key. Limits are not compared,
// tokens are 0 (as for every Redlock lease), and waiters poll.
func (d *redlockDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	return generic.Semaphore{D: d}.TryLockSemaphore(ctx, key, limit, ttl)
}
