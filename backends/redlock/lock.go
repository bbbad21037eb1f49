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
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

func newDriver(clients []redis.UniversalClient, c config) *redlockDriver {
	if len(clients) == 0 {
		panic("redlock: New needs at least one client")
	}
	if c.maxInFlight <= 0 {
		c.maxInFlight = DefaultMaxInFlight
	}
	d := &redlockDriver{cfg: c, quorum: len(clients)/2 + 1, closing: make(chan struct{})}
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

// FirstContactTimeout is the per-node timeout of a Locker's requests to a master
// until one of them has ended, when it is longer than the usual one: the first
// request dials, shakes hands and loads the Lua script. A master that is down when
// the Locker starts costs its first round this long (not the later ones).
//
// (Four round trips; on a loaded 2-core machine under -race they took over 50ms.)
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
	// closing is closed when Close begins: releases still waiting for a slot go at once.
	closing   chan struct{}
	closeOnce sync.Once
}

func (d *redlockDriver) nodeTimeout(ttl time.Duration) time.Duration {
	if d.cfg.nodeTimeout > 0 {
		return d.cfg.nodeTimeout
	}
	return NodeTimeout(ttl)
}

// TryLock is steps 1–4 of the algorithm (package doc), with the tie-break of a split
// vote (tiebreak.go).
func (d *redlockDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	lk, _, err := d.tryLock(ctx, key, ttl, nil)
	return lk, err
}

// tryLock is TryLock; with q, every master also keeps (or gives up) q's place in
// key's queue of waiters (queue.go), and a grant remembers q's name for the release.
// held reports, for a lost round, whether another value held key on a majority of
// the masters that answered: its release will be announced. Otherwise the lock was
// free or split between contenders, and nothing may announce anything.
func (d *redlockDriver) tryLock(ctx context.Context, key string, ttl time.Duration, q *queued) (lk driver.Lock, held bool, err error) {
	start := time.Now()
	value := redisops.NewOwner(ctx)
	timeout := d.nodeTimeout(ttl)
	longest := timeout // the longest a request of this round may stay in flight
	if d.firstContact() {
		longest = max(timeout, FirstContactTimeout)
	}
	// judged is closed once a lost round is judged: keep says whether its grants are
	// kept for a claim (tiebreak.go) rather than withdrawn (step 4).
	judged := make(chan struct{})
	var keep bool
	judge := func(k bool) { keep = k; close(judged) }
	call := voteCall(key, value, ttl, q)
	r := d.poll(ctx, timeout, func(ctx context.Context, i int) vote {
		return d.acquireVote(ctx, i, call)
	}, func(v vote, won bool) {
		// Step 4: a master that granted, or whose answer was lost, may hold our value.
		// A refusal is an atomic "held by another", and a request never sent did
		// nothing: nothing of ours is there.
		if won || !v.sent || v.answer == no {
			return
		}
		<-judged
		if !keep {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			d.withdrawNode(ctx, v.node, key, value)
		}
	})
	if r.won {
		judge(false)
		return d.newLock(key, value, ttl, start, r.ended, longest, q), false, nil
	}
	if r.ctxErr == nil && d.tooMany(r, failed) {
		judge(false)
		// The masters are down or hung: say so now; the releases of step 4 go on in
		// the background (Close waits for them) instead of costing another timeout.
		return nil, false, d.undecided(r, fmt.Sprintf("acquire %q", key))
	}
	if r.ctxErr == nil && d.holdsSplitGate(r, key, longest) {
		judge(true)
		if lk := d.claim(ctx, r, key, value, ttl, start, longest, q, call); lk != nil {
			return lk, false, nil
		}
	} else {
		judge(false)
	}
	// Every release of step 4 is done: nothing of ours is left behind. (A request to a
	// hung master on a client without ContextTimeoutEnabled may outlast longest; its
	// release then follows in the background.)
	waitAtMost(r.settled, 2*longest)
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("acquire %q: %w", key, err)
	}
	return nil, d.majorityHolder(ended(r)), driver.Busy(d.busyFor(r))
}

// newLock is a grant of key to value: valid from start for ttl − drift; acquired[i]
// is closed when the acquire request to master i has ended, within settleWithin. q
// is the waiter that was granted it (nil for TryLock).
func (d *redlockDriver) newLock(key, value string, ttl time.Duration, start time.Time, acquired []chan struct{}, settleWithin time.Duration, q *queued) *lock {
	l := &lock{d: d, key: key, value: value, ttl: ttl, validFrom: start, validUntil: start.Add(ttl - d.cfg.drift(ttl)),
		released: make([]atomic.Bool, len(d.nodes)), acquired: acquired, settleWithin: settleWithin}
	if q != nil {
		l.waiter = q.name
	}
	return l
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

// releaseNode sends call (releaseCall) to master i: it deletes the key there if it
// holds the caller's value, takes the caller's place (if any) out of the key's
// queue, and wakes the first waiter of the queue (release.lua).
func (d *redlockDriver) releaseNode(ctx context.Context, i int, call scriptCall) vote {
	return voteOf(release(ctx, d.nodes[i].c, call))
}

// withdrawNode deletes key on master i if it holds value, without an announcement:
// the grant of a lost round, which never made the lock free or held.
func (d *redlockDriver) withdrawNode(ctx context.Context, i int, key, value string) {
	_, _ = redisops.Withdraw(ctx, d.nodes[i].c, key, value)
}

// Close waits for the requests still in flight (a release still waiting for a slot
// is sent at once, past WithMaxInFlight), then ends the release subscriptions and,
// for a URL opener's Locker, the clients.
func (d *redlockDriver) Close() error {
	d.closeOnce.Do(func() { close(d.closing) })
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
	waiter     string        // the name in key's queue of the Acquire that was granted it, or ""
	ttl        time.Duration // the last TTL set (for the per-node timeout of Unlock)
	validFrom  time.Time     // the start of the round that granted it
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

// ValidFrom is the moment the round that granted the lock started
// (driver.ValidFrom): a waiting Acquire's lease counts its TTL from there, not from
// the start of its wait.
func (l *lock) ValidFrom() time.Time { return l.validFrom }

// errValidityOver: a refresh started after the lease's validity deadline.
var errValidityOver = errors.New("the lease's validity is over")

// Token is always 0: Redlock has no counter that every later grant is sure to exceed
// (see the docs page).
func (l *lock) Token() uint64 { return 0 }

// Refresh sets the TTL to ttl on every master that still holds our value and succeeds
// when a majority did so before the lease's validity deadline (step 5). It returns
// dlock.ErrNotHeld when more than N − quorum masters no longer hold our value, and
// an error wrapping dlock.ErrUnavailable when too few clear answers came: the lease
// then keeps its old validity deadline. A refresh that starts when the validity is
// over asks no master and returns errValidityOver: no master refused anything, so
// it is not ErrNotHeld (which dlock reports as a lock the store no longer holds);
// dlock's own deadline ends the lease.
func (l *lock) Refresh(ctx context.Context, ttl time.Duration) error {
	start := time.Now()
	if !start.Before(l.validUntil) {
		return fmt.Errorf("redlock: refresh %q: %w", l.key, errValidityOver)
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
		return fmt.Errorf("%s %q: %w", what, l.key, r.ctxErr)
	}
	return l.d.undecided(r, fmt.Sprintf("%s %q", what, l.key))
}

// Unlock deletes our key on every master (owner-checked) and succeeds once a majority
// deleted it; the other masters' deletes go on in the background (Close waits for
// them), also when ctx ends after that, each within the per-node timeout once sent.
// A master's delete waits for a slot there behind this Locker's other requests
// (WithMaxInFlight) as long as our key may live there (the last TTL set; once Close
// has begun it goes at once): our vote may still be on its way to that master, and
// a delete given up would let it leave our key until its TTL. When ctx ends before
// the outcome is known, the deletes not yet sent are not sent. It returns
// dlock.ErrNotHeld when more than N − quorum masters no longer held it, and an error
// wrapping dlock.ErrUnavailable when too few clear answers came (Unlock may then be
// retried; masters already done are not asked again).
func (l *lock) Unlock(ctx context.Context) error {
	timeout := l.d.nodeTimeout(l.ttl)
	call := releaseCall(l.key, l.value, l.waiter, timeout)
	rel := releaseWait{until: time.Now().Add(l.ttl), done: func(i int) bool { return l.released[i].Load() }}
	r := l.d.pollAll(ctx, timeout, rel, func(ctx context.Context, i int) vote {
		l.awaitAcquire(i)
		v := l.d.releaseNode(ctx, i, call)
		if v.answer == yes {
			l.released[i].Store(true)
		}
		return v
	})
	return l.outcome(r, "release")
}
