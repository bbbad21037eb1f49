// The quorum engine: one request sent to every master in parallel, decided as soon
// as a majority said yes or can no longer say it. Generic over what the request is
// (acquire, refresh, release); lock.go says what each request does.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
)

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
	holder    string        // acquire, no: the holder's value on that master
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
	final   []vote          // per master: its request's outcome, set before ended[i] closes

	in       chan vote     // the first vote of each master, to poll's count
	reported []atomic.Bool // per master: its first vote went to in

	// The per-node timeout of the requests sent at once (sharedDeadline): one
	// context and one timer for all of them, from the round's start.
	start     time.Time
	timeout   time.Duration
	sharedCtx context.Context
	endShared context.CancelFunc
	sharedEnd *time.Timer
	shared    []atomic.Bool // per master: its request runs under sharedCtx

	// A release round (pollAll) whose caller's ctx ended before the outcome was
	// known: requests not yet sent are not sent (abandonErr is their vote's error;
	// set before abandoned).
	abandoned  atomic.Bool
	abandonErr error
}

// timedOut reports a timeout vote for every master whose request runs under the
// round's shared deadline and has not answered (time.AfterFunc calls it then).
func (r *round) timedOut() {
	for i := range r.shared {
		if r.shared[i].Load() {
			r.report(i, vote{answer: failed, err: errNodeTimeout{r.timeout}, sent: true})
		}
	}
}

// report passes master i's vote to the count, unless one was passed already (the
// per-node timeout's vote, or the request's own).
func (r *round) report(i int, v vote) {
	if r.reported[i].CompareAndSwap(false, true) {
		v.node = i
		r.in <- v
	}
}

// poll sends op to every master in parallel, each request bounded by timeout (a
// master that has not answered by then votes "failed"), and returns as soon as the
// outcome is known: a majority said yes, or more than N − quorum said no or failed,
// or ctx ended. Requests still running go on in the background; round.settled is
// closed when every one of them (and its then) ended. then, if not nil, runs in each
// master's goroutine once that master's request has ended and the decision is known;
// it gets the request's real outcome.
func (d *redlockDriver) poll(ctx context.Context, timeout time.Duration, op func(ctx context.Context, i int) vote, then func(v vote, won bool)) *round {
	return d.pollMode(ctx, timeout, op, then, nil)
}

// releaseWait is what pollAll adds to poll: how long a release waits for a slot, and
// which masters need none.
type releaseWait struct {
	until time.Time        // the key of ours on a master is gone by then (its TTL)
	done  func(i int) bool // master i answered an earlier try already: yes, unsent
}

// pollAll is poll for a release, which must reach a master even after the outcome
// is known: the lease's own vote to that master may still be in flight, and a
// release given up would let the vote leave our key there until its TTL. A request
// that waits for a slot waits past the decision, until rel.until (when our key has
// expired there anyway) or until Close begins (it is then sent at once); a request
// sent runs to its per-node timeout.
// The requests do not stop when ctx ends (a caller's deferred cancel does not cut
// them; Close waits for them). But if ctx ends before the outcome is known (or had
// ended), the requests not yet sent are not sent, as with poll: a release that did
// not say it succeeded should not go on to free the lock behind the caller's back.
// (One already sent runs to its answer or its per-node timeout: the master has it.)
func (d *redlockDriver) pollAll(ctx context.Context, timeout time.Duration, rel releaseWait, op func(ctx context.Context, i int) vote) *round {
	return d.pollMode(ctx, timeout, op, nil, &rel)
}

func (d *redlockDriver) pollMode(ctx context.Context, timeout time.Duration, op func(ctx context.Context, i int) vote, then func(v vote, won bool), rel *releaseWait) *round {
	n := len(d.nodes)
	votes, flags := make([]vote, 2*n), make([]atomic.Bool, 2*n) // one array for two slices each
	r := &round{settled: make(chan struct{}), ended: make([]chan struct{}, n), final: votes[:n:n],
		votes: votes[n:n], in: make(chan vote, n), reported: flags[:n:n],
		start: time.Now(), timeout: timeout, shared: flags[n:]}
	for i := range r.ended {
		r.ended[i] = make(chan struct{})
	}
	rctx := ctx
	if rel != nil {
		// A release's requests outlive ctx once the round is decided; until then
		// the round is abandoned when ctx ends (r.abandoned), and unsent requests
		// are not sent.
		rctx = context.WithoutCancel(ctx)
		if ctx.Err() != nil {
			r.abandon(ctx.Err())
		}
	}
	r.sharedCtx, r.endShared = context.WithTimeout(rctx, timeout)
	r.sharedEnd = time.AfterFunc(timeout, r.timedOut)
	decided := make(chan struct{})
	var left atomic.Int32
	left.Store(int32(n))
	d.inflight.Add(n)
	for i := range d.nodes {
		go func() {
			defer d.inflight.Done()
			v := d.send(rctx, r, decided, rel, i, timeout, op)
			v.node = i
			r.final[i] = v
			close(r.ended[i])
			r.report(i, v)
			if then != nil {
				<-decided
				then(v, r.won) // the real outcome, even if it came after the timeout
			}
			if left.Add(-1) == 0 {
				r.sharedEnd.Stop()
				r.endShared()
				close(r.settled)
			}
		}()
	}
	defer close(decided)
	var ayes, nays int
	for ayes < d.quorum && nays <= n-d.quorum {
		select {
		case v := <-r.in:
			r.votes = append(r.votes, v)
			if v.answer == yes {
				ayes++
			} else {
				nays++
			}
		case <-ctx.Done():
			r.ctxErr = ctx.Err()
			if rel != nil && !r.abandoned.Load() { // only this goroutine abandons
				r.abandon(r.ctxErr) // before decided closes (deferred), for send's wait
			}
			return r
		}
	}
	r.won = ayes >= d.quorum
	return r
}

// abandon marks a release round given up because the caller's ctx ended (with err)
// before its outcome was known: its requests not yet sent are not sent.
func (r *round) abandon(err error) {
	r.abandonErr = err
	r.abandoned.Store(true)
}

// givenUp returns the vote of a request not sent because its round was abandoned.
func (r *round) givenUp() (vote, bool) {
	if r.abandoned.Load() {
		return vote{answer: failed, err: r.abandonErr}, true
	}
	return vote{}, false
}

// send runs op for master i once it has a slot, and returns its outcome. It gives
// up without sending when ctx has ended, or when it has to wait for a slot and ctx
// ends or the round is decided first; a release (rel, pollAll) is given up at the
// decision only if its round was abandoned (the caller's ctx ended before the
// outcome was known), else at rel.until, goes without a slot once Close has begun (so that
// Close waits for one request per release, not for a queue of them), and needs no
// slot for a master already done. When the per-node timeout ends, op's ctx ends
// and the count gets a timeout vote, even if op does not return (go-redis only
// obeys ctx deadlines on the socket with Options.ContextTimeoutEnabled; otherwise it
// waits up to its ReadTimeout). The timeout runs from the moment the request is
// sent, except for a request that goes out at once (sharedDeadline).
func (d *redlockDriver) send(ctx context.Context, r *round, decided <-chan struct{}, rel *releaseWait, i int, timeout time.Duration, op func(ctx context.Context, i int) vote) vote {
	slots := d.nodes[i].slots
	if err := ctx.Err(); err != nil {
		return vote{answer: failed, err: err}
	}
	if v, ok := r.givenUp(); ok {
		return v
	}
	if rel != nil && rel.done != nil && rel.done(i) {
		return vote{answer: yes}
	}
	// A free slot sends the request even when the round was decided meanwhile (a
	// goroutine scheduled late on a loaded machine): a lost round's tie-break needs
	// the gate's answer (tiebreak.go). Only a request that would wait for a slot is
	// given up once the outcome is known, and a release's (pollAll) only if its
	// round was abandoned.
	waited, slotted := false, true
	select {
	case slots <- struct{}{}:
	default:
		waited = true
		var giveUp <-chan time.Time
		var closing <-chan struct{}
		if rel != nil {
			t := time.NewTimer(time.Until(rel.until))
			defer t.Stop()
			giveUp, closing = t.C, d.closing
		}
	wait:
		for {
			select {
			case slots <- struct{}{}:
				break wait
			case <-ctx.Done():
				return vote{answer: failed, err: ctx.Err()}
			case <-decided:
				if v, ok := r.givenUp(); ok {
					return v
				}
				if rel == nil {
					return vote{answer: failed, err: errNotSent}
				}
				decided = nil // a release waits on past the decision
			case <-giveUp:
				return vote{answer: failed, err: errNotSent}
			case <-closing:
				slotted = false // Close is waiting: go now, past the limit
				break wait
			}
		}
	}
	if slotted {
		defer func() { <-slots }()
	}
	nd := &d.nodes[i]
	nctx := r.sharedCtx
	if !waited && nd.contacted.Load() && time.Since(r.start) <= timeout/sharedDeadline {
		r.shared[i].Store(true)
	} else {
		if !nd.contacted.Load() {
			timeout = max(timeout, FirstContactTimeout)
		}
		timer := time.AfterFunc(timeout, func() { r.report(i, vote{answer: failed, err: errNodeTimeout{timeout}, sent: true}) })
		defer timer.Stop()
		var cancel context.CancelFunc
		nctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	v := op(nctx, i)
	v.sent = true
	nd.contacted.Store(true)
	if v.answer == failed && nctx.Err() != nil && ctx.Err() == nil {
		v.err = errNodeTimeout{timeout}
	}
	return v
}

// sharedDeadline: a request sent at once — a free slot, a master already contacted,
// at most timeout/sharedDeadline after the round began — runs under the round's
// per-node timeout, which began with the round, so one context and one timer serve
// every such request of the round (they were a third of an uncontended
// Acquire+Release's allocations). Such a request gets at least 3/4 of the timeout;
// a later one (a goroutine scheduled late on a loaded machine, a request that waited
// for a slot) gets a timeout of its own from the moment it is sent.
const sharedDeadline = 4

// errNotSent is the vote of a master whose request was still waiting for a slot when
// the round was decided (a release: when its wait ran out, or at Close).
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
