// Package redlock is the Redlock backend of dlock: one lock over N independent Redis
// masters (no replication between them), held when a majority of them granted it.
//
// The algorithm, step by step (docs/backends/redlock.md names the test of each):
//
//  1. Acquire: send the same key and the same random 128-bit value to every master in
//     parallel (redisops.Acquire: SET-if-absent with a PX expiry, in Lua), each request
//     bounded by a short per-node timeout (DefaultNodeTimeout, or WithNodeTimeout).
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
//     delay (WithRetry) before the next attempt.
//  5. Refresh and Release go to every master in parallel; Refresh succeeds only when a
//     majority extended the lock within its validity, Release when a majority deleted
//     it (owner-checked: only keys holding our value are touched).
//
// Waiters are woken by the release messages of the masters (Subscribe, in wake.go)
// and otherwise retry after the retry strategy's random delay.
//
// Not guaranteed (see the docs page): mutual exclusion when a master restarts without
// persistence before a TTL has passed (the declared weakness, reproduced by
// TestRestartWithoutPersistenceLetsASecondClientIn), when clocks of a majority of
// masters jump, or against a holder paused past its validity. There is no fencing
// token: Token is always 0.
package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisops"
)

// Option configures New.
type Option func(*config)

type config struct {
	nodeTimeout time.Duration // 0: DefaultNodeTimeout(ttl)
	maxInFlight int
	drift       func(time.Duration) time.Duration
	ownsClients bool // Close closes the clients (URL openers)
}

// WithNodeTimeout sets a fixed per-node timeout: how long one request to one master
// may take before that master counts as unreachable for this request. d <= 0 keeps
// the default, DefaultNodeTimeout(ttl). A larger timeout costs nothing while a
// majority answers quickly (the decision does not wait for the slow ones); it makes a
// failing attempt, and dlock.ErrUnavailable, come later when masters hang.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) { c.nodeTimeout = d }
}

// WithMaxInFlight sets how many requests one Locker has in flight to one master at
// a time (default DefaultMaxInFlight); further requests wait in this process, and
// their per-node timeout starts only when they are sent. A request still waiting when
// its round is decided is not sent at all (so a Release that a majority confirmed
// may leave the key, until its TTL, on a master that was still busy). n <= 0 keeps
// the default.
func WithMaxInFlight(n int) Option {
	return func(c *config) { c.maxInFlight = n }
}

// DefaultMaxInFlight is the default of WithMaxInFlight. Two requests in flight per
// master keep a burst of lock calls on a new client from dialing dozens of
// connections at once (on a loaded 2-core machine, 64 concurrent first requests to
// one master took about 45ms each, close to the per-node timeout), and are plenty
// for lock traffic at local-network round trips (thousands of calls per second).
const DefaultMaxInFlight = 2

// WithDrift sets the clock-drift allowance: a lease's validity is TTL − elapsed −
// (TTL×factor + fixed). The default is driver.DefaultDrift: factor 0.01, fixed 2ms.
// The allowance covers masters whose clocks run faster than this client's; it does
// not cover clock jumps.
func WithDrift(factor float64, fixed time.Duration) Option {
	return func(c *config) {
		c.drift = func(ttl time.Duration) time.Duration {
			return time.Duration(float64(ttl)*factor) + fixed
		}
	}
}

// DefaultNodeTimeout is the per-node timeout for a lease of ttl when WithNodeTimeout
// is not given: ttl/100, at least 50ms and at most 250ms (100ms for the default 10s
// TTL). It is small against the TTL, so that an attempt that has to wait for a
// master that does not answer still leaves most of the validity, and no smaller
// than 50ms because a loaded machine answers late: on the 2-core CI machine under
// -race, 10ms requests to local masters timed out often enough to fail the
// conformance suite (TestDefaultNodeTimeout records the choice).
func DefaultNodeTimeout(ttl time.Duration) time.Duration {
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
// Not guaranteed: see the package doc. Token is always 0.
func New(clients []redis.UniversalClient, opts ...Option) dlock.Locker {
	c := config{drift: driver.DefaultDrift}
	for _, o := range opts {
		o(&c)
	}
	return dlock.New(newDriver(clients, c), driver.Info{Name: "redlock", Drift: c.drift, MinTTL: MinTTL})
}

func newDriver(clients []redis.UniversalClient, c config) *redlockDriver {
	if len(clients) == 0 {
		panic("redlock: New needs at least one client")
	}
	if c.maxInFlight <= 0 {
		c.maxInFlight = DefaultMaxInFlight
	}
	d := &redlockDriver{cfg: c, quorum: len(clients)/2 + 1}
	seen := map[string]bool{}
	for i, cl := range clients {
		if cl == nil {
			panic(fmt.Sprintf("redlock: client %d is nil", i))
		}
		name := fmt.Sprintf("master %d", i+1)
		if rc, ok := cl.(*redis.Client); ok {
			addr := rc.Options().Addr
			if seen[addr] {
				panic("redlock: two clients of the same master " + addr + ": the quorum needs independent masters")
			}
			seen[addr] = true
			name += " (" + addr + ")"
		}
		d.nodes = append(d.nodes, node{c: cl, name: name, releases: redisops.NewReleases(cl), slots: make(chan struct{}, c.maxInFlight)})
	}
	return d
}

type node struct {
	c        redis.UniversalClient
	name     string
	releases *redisops.Releases // release messages of this master, for waiters
	// slots bounds the requests in flight to this master (WithMaxInFlight); the
	// per-node timeout of a request starts once it has a slot, so that it measures
	// the master, not this process's own queue.
	slots chan struct{}
	// contacted: a request of this Locker to the master has ended (answered or
	// not); until then its requests get FirstContactTimeout.
	contacted atomic.Bool
}

// FirstContactTimeout is the per-node timeout of the first requests of a Locker to a
// master, when it is longer than the usual one: the first request dials, shakes
// hands and loads the Lua script (four round trips), and on the loaded 2-core CI
// machine under -race that took over 50ms. A master that is down when the Locker
// starts costs its first round this long (not the later ones).
const FirstContactTimeout = 500 * time.Millisecond

// firstContact reports whether some master has not been contacted yet.
func (d *redlockDriver) firstContact() bool {
	for i := range d.nodes {
		if !d.nodes[i].contacted.Load() {
			return true
		}
	}
	return false
}

type redlockDriver struct {
	nodes  []node
	quorum int
	cfg    config
	// inflight counts node requests still running, some after the call that sent
	// them returned (a decision does not wait for slow masters); Close waits for them.
	inflight sync.WaitGroup
}

func (d *redlockDriver) nodeTimeout(ttl time.Duration) time.Duration {
	if d.cfg.nodeTimeout > 0 {
		return d.cfg.nodeTimeout
	}
	return DefaultNodeTimeout(ttl)
}

// answer is one master's reply to one request.
type answer int

const (
	yes    answer = iota + 1 // granted, refreshed, released
	no                       // held by another owner / not ours
	failed                   // no usable reply (error, timeout)
)

type vote struct {
	node      int
	answer    answer
	remaining time.Duration // acquire, no: the holder's remaining TTL on that master
	err       error         // failed: why
	sent      bool          // the request went out (it may have had effects)
}

// errNodeTimeout replaces the context error of a request cut by the per-node timeout,
// so that it is not mistaken for the end of the caller's ctx.
type errNodeTimeout struct{ d time.Duration }

func (e errNodeTimeout) Error() string {
	return fmt.Sprintf("no answer within the per-node timeout %v", e.d)
}

// round is one request sent to every master in parallel.
type round struct {
	votes   []vote // in arrival order, up to the decision
	won     bool   // a majority said yes
	ctxErr  error  // the caller's ctx ended before the decision
	settled chan struct{}
	ended   []chan struct{} // per master: closed when its request has ended
}

// poll sends op to every master in parallel, each request bounded by timeout (a
// master that has not answered by then votes "failed"), and returns as soon as the
// outcome is known: a majority said yes, or more than N − quorum said no or failed,
// or ctx ended. Requests still running go on in the background; round.settled is
// closed when every one of them (and its then) ended. then, if not nil, runs in each
// master's goroutine once that master's request has ended and the decision is known;
// it gets the request's real outcome.
func (d *redlockDriver) poll(ctx context.Context, timeout time.Duration, op func(ctx context.Context, i int) vote, then func(v vote, won bool)) *round {
	n := len(d.nodes)
	r := &round{settled: make(chan struct{}), ended: make([]chan struct{}, n)}
	for i := range r.ended {
		r.ended[i] = make(chan struct{})
	}
	votes := make(chan vote, n)
	decided := make(chan struct{})
	var left atomic.Int32
	left.Store(int32(n))
	d.inflight.Add(n)
	for i := range d.nodes {
		go func() {
			defer d.inflight.Done()
			var once sync.Once
			report := func(v vote) {
				once.Do(func() {
					v.node = i
					votes <- v
				})
			}
			v := d.send(ctx, decided, i, timeout, op, report)
			close(r.ended[i])
			v.node = i
			report(v)
			if then != nil {
				<-decided
				then(v, r.won) // the real outcome, even if it came after the timeout
			}
			if left.Add(-1) == 0 {
				close(r.settled)
			}
		}()
	}
	defer close(decided)
	var ayes, nays int
	for ayes < d.quorum && nays <= n-d.quorum {
		select {
		case v := <-votes:
			r.votes = append(r.votes, v)
			if v.answer == yes {
				ayes++
			} else {
				nays++
			}
		case <-ctx.Done():
			r.ctxErr = ctx.Err()
			return r
		}
	}
	r.won = ayes >= d.quorum
	return r
}

// send runs op for master i once it has a slot, and returns its outcome. It gives
// up without sending when ctx ends or the round is decided first. The per-node
// timeout runs from the moment the request is sent: op's ctx ends then, and report
// gets a timeout vote then even if op does not return (go-redis only obeys ctx
// deadlines on the socket with Options.ContextTimeoutEnabled; otherwise it waits up
// to its ReadTimeout).
func (d *redlockDriver) send(ctx context.Context, decided <-chan struct{}, i int, timeout time.Duration, op func(ctx context.Context, i int) vote, report func(vote)) vote {
	slots := d.nodes[i].slots
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return vote{answer: failed, err: ctx.Err()}
	case <-decided:
		return vote{answer: failed, err: errNotSent}
	}
	defer func() { <-slots }()
	nd := &d.nodes[i]
	if !nd.contacted.Load() {
		timeout = max(timeout, FirstContactTimeout)
	}
	timer := time.AfterFunc(timeout, func() { report(vote{answer: failed, err: errNodeTimeout{timeout}, sent: true}) })
	defer timer.Stop()
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v := op(nctx, i)
	v.sent = true
	nd.contacted.Store(true)
	if v.answer == failed && nctx.Err() != nil && ctx.Err() == nil {
		v.err = errNodeTimeout{timeout}
	}
	return v
}

// errNotSent is the vote of a master whose request was still waiting for a slot when
// the round was decided.
var errNotSent = errors.New("not sent: the outcome was known first")

// count returns how many votes gave answer a.
func (r *round) count(a answer) int {
	c := 0
	for _, v := range r.votes {
		if v.answer == a {
			c++
		}
	}
	return c
}

// undecided is the error of a round that failed without a majority of clear
// answers: it wraps dlock.ErrUnavailable and names the masters that failed.
func (d *redlockDriver) undecided(r *round, what string) error {
	var errs []error
	for _, v := range r.votes {
		if v.answer == failed {
			errs = append(errs, fmt.Errorf("%s: %w", d.nodes[v.node].name, v.err))
		}
	}
	return fmt.Errorf("%w: redlock: %s: %d of %d masters failed, %d refused, %d agreed; a majority of %d cannot be reached: %w",
		dlock.ErrUnavailable, what, len(errs), len(d.nodes), r.count(no), r.count(yes), d.quorum, errors.Join(errs...))
}

// tooMany reports whether more than N − quorum masters gave answer a: a majority
// can then not say anything else.
func (d *redlockDriver) tooMany(r *round, a answer) bool {
	return r.count(a) > len(d.nodes)-d.quorum
}

// TryLock is steps 1–4 of the algorithm (package doc).
func (d *redlockDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	start := time.Now()
	value := redisops.NewValue()
	timeout := d.nodeTimeout(ttl)
	longest := timeout // the longest a request of this round may stay in flight
	if d.firstContact() {
		longest = max(timeout, FirstContactTimeout)
	}
	r := d.poll(ctx, timeout, func(ctx context.Context, i int) vote {
		_, remaining, ok, err := redisops.Acquire(ctx, d.nodes[i].c, key, value, ttl)
		v := voteOf(ok, err)
		v.remaining = remaining
		return v
	}, func(v vote, won bool) {
		// Step 4: a master that granted, or whose answer was lost, may hold our value.
		// A refusal is an atomic "held by another", and a request never sent did
		// nothing: nothing of ours is there.
		if !won && v.sent && v.answer != no {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			d.releaseNode(ctx, v.node, key, value)
		}
	})
	if r.won {
		return &lock{d: d, key: key, value: value, ttl: ttl, validUntil: start.Add(ttl - d.cfg.drift(ttl)),
			released: make([]atomic.Bool, len(d.nodes)), acquired: r.ended, settleWithin: longest}, nil
	}
	if r.ctxErr == nil && d.tooMany(r, failed) {
		// The masters are down or hung: say so now; the releases of step 4 go on in
		// the background (Close waits for them) instead of costing another timeout.
		return nil, d.undecided(r, fmt.Sprintf("acquire %q", key))
	}
	// Every release of step 4 is done: nothing of ours is left behind. (A request to a
	// hung master on a client without ContextTimeoutEnabled may outlast longest; its
	// release then follows in the background.)
	waitAtMost(r.settled, 2*longest)
	if r.ctxErr != nil {
		return nil, fmt.Errorf("redlock: acquire %q: %w", key, r.ctxErr)
	}
	return nil, driver.Busy(d.busyFor(r))
}

// busyFor estimates how long until enough of the masters that refused the lock free
// it for a majority: their remaining TTLs, sorted, taken at the first one after which
// a majority could grant. 0 if unknown.
func (d *redlockDriver) busyFor(r *round) time.Duration {
	var rem []time.Duration
	for _, v := range r.votes {
		if v.answer == no {
			rem = append(rem, v.remaining)
		}
	}
	// The masters that must change their answer: every "no" or "failed" beyond the
	// N − quorum that a majority can do without.
	need := len(r.votes) - r.count(yes) - (len(d.nodes) - d.quorum)
	if need < 1 || need > len(rem) {
		return 0
	}
	slices.Sort(rem)
	return rem[need-1]
}

// releaseNode deletes key on master i if it holds value.
func (d *redlockDriver) releaseNode(ctx context.Context, i int, key, value string) vote {
	return voteOf(redisops.Release(ctx, d.nodes[i].c, key, value))
}

// voteOf turns a master's reply into a vote.
func voteOf(ok bool, err error) vote {
	switch {
	case err != nil:
		return vote{answer: failed, err: err}
	case ok:
		return vote{answer: yes}
	}
	return vote{answer: no}
}

func (d *redlockDriver) Close() error {
	d.inflight.Wait()
	var errs []error
	for i := range d.nodes {
		n := &d.nodes[i]
		if err := n.releases.Close(); err != nil {
			errs = append(errs, fmt.Errorf("%s: release messages: %w", n.name, err))
		}
		if d.cfg.ownsClients {
			if err := n.c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// lock is one grant: the value identifies it on every master. Refresh and Unlock are
// never called concurrently for one lock (dlock serializes them).
type lock struct {
	d          *redlockDriver
	key, value string
	ttl        time.Duration // the last TTL set (for the per-node timeout of Unlock)
	validUntil time.Time     // start of the last grant or refresh + ttl − drift
	released   []atomic.Bool // per master: our key is gone there (for a retried Unlock)
	// acquired[i] is closed when the acquire's request to master i has ended, which
	// takes at most settleWithin on clients with ContextTimeoutEnabled.
	acquired     []chan struct{}
	settleWithin time.Duration
}

// awaitAcquire waits until the acquire request to master i has ended, at most
// settleWithin (a request past it stays in flight only on a client without
// ContextTimeoutEnabled; a delete that overtakes it leaves the key there until its
// TTL). A refresh sent before it would find "not ours"; a delete would be
// overtaken.
func (l *lock) awaitAcquire(i int) { waitAtMost(l.acquired[i], l.settleWithin) }

// waitAtMost waits until ch is closed or d has passed.
func waitAtMost(ch <-chan struct{}, d time.Duration) {
	select {
	case <-ch:
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

// Token is always 0: Redlock has no counter that every later grant is sure to exceed
// (see the docs page).
func (l *lock) Token() uint64 { return 0 }

// Refresh sets the TTL to ttl on every master that still holds our value and succeeds
// when a majority did so before the lease's validity deadline (step 5). It returns
// dlock.ErrNotHeld when the validity is over or more than N − quorum masters no
// longer hold our value, and an error wrapping dlock.ErrUnavailable when too few
// clear answers came: the lease then keeps its old validity deadline.
func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	start := time.Now()
	if !start.Before(l.validUntil) {
		return fmt.Errorf("%w: redlock: the validity of %q is over", dlock.ErrNotHeld, l.key)
	}
	ctx, cancel := context.WithDeadline(ctx, l.validUntil)
	defer cancel()
	r := l.d.poll(ctx, l.d.nodeTimeout(ttl), func(ctx context.Context, i int) vote {
		l.awaitAcquire(i)
		return voteOf(redisops.Refresh(ctx, l.d.nodes[i].c, l.key, l.value, ttl))
	}, nil)
	if r.won {
		l.ttl, l.validUntil = ttl, start.Add(ttl-l.d.cfg.drift(ttl))
	}
	return l.outcome(r, "refresh")
}

// outcome is the error of a Refresh or Unlock round: nil when a majority said yes,
// dlock.ErrNotHeld when more than N − quorum said no, the ctx error, or an error
// wrapping dlock.ErrUnavailable.
func (l *lock) outcome(r *round, what string) error {
	switch {
	case r.won:
		return nil
	case l.d.tooMany(r, no):
		return fmt.Errorf("%w: redlock: %d of %d masters no longer hold %q", dlock.ErrNotHeld, r.count(no), len(l.d.nodes), l.key)
	case r.ctxErr != nil:
		return fmt.Errorf("redlock: %s %q: %w", what, l.key, r.ctxErr)
	}
	return l.d.undecided(r, fmt.Sprintf("%s %q", what, l.key))
}

// Unlock deletes our key on every master (owner-checked) and succeeds once a majority
// deleted it; the other masters' deletes go on in the background (Close waits for
// them). It returns dlock.ErrNotHeld when more than N − quorum masters no longer held
// it, and an error wrapping dlock.ErrUnavailable when too few clear answers came
// (Unlock may then be retried; masters already done are not asked again).
func (l *lock) Unlock(ctx context.Context) error {
	r := l.d.poll(ctx, l.d.nodeTimeout(l.ttl), func(ctx context.Context, i int) vote {
		if l.released[i].Load() {
			return vote{answer: yes}
		}
		l.awaitAcquire(i)
		v := l.d.releaseNode(ctx, i, l.key, l.value)
		if v.answer == yes {
			l.released[i].Store(true)
		}
		return v
	}, nil)
	return l.outcome(r, "release")
}
