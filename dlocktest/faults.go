package dlocktest

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// loseWait bounds how long Lose waits for the lease to end once told (the lease
// core ends it at once; a lease that does not is a defect Lose reports).
const loseWait = 10 * time.Second

// Lose ends lease l's lock now, and makes its holder learn of it as cause says —
// the cause production gives for that kind of loss:
//
//   - dlock.CauseDeleted: the store deletes the lock and says so (an etcd key or a
//     ZooKeeper node deleted, as a watch sees it);
//   - dlock.CauseSession: the store ends the holder's session (a ZooKeeper session
//     expired, a GET_LOCK connection killed);
//   - dlock.CauseExpired: the lock's TTL runs out on the store now, and the store
//     says so: the lease ends as at its validity deadline — CauseExpired, or
//     CauseUnreachable for an auto-renewed lease;
//   - dlock.CauseUnreachable: the client gives the lock up as cut off from the
//     store, which keeps it until its TTL ends (LossError.HeldUntil);
//   - dlock.CauseRefused: the store drops the lock without a word (its TTL ran out
//     on a faster clock, it was evicted or lost in a failover). The holder finds
//     out at its next Refresh or Release — an auto-renewed lease within a third of
//     its TTL — with CauseRefused; until then its lease looks valid, and another
//     client can be granted the lock (see TakeOver).
//
// For every cause but CauseRefused, Lose returns once l's Done has closed, and
// the store frees the lock only then (or at its TTL): no other client is granted
// it while l looks valid. Lose returns an error for a lease that is not this
// Store's or has ended, and for another cause; it fails the lease core's
// promise, and says so, when l's Done does not close within 10s of being told.
//
// l may be any lease of the Store's clients: a mutex's, a permit, a shared or
// exclusive lease, an election's term, or a set of keys (AcquireAll: the key
// whose token is the set's).
func (s *Store) Lose(l dlock.Lease, cause dlock.Cause) error {
	lk := s.lockOf(l)
	if lk == nil {
		return fmt.Errorf("dlocktest: Lose: %v is not a lease of this store", l)
	}
	select {
	case <-l.Done():
		return fmt.Errorf("dlocktest: Lose: the lease of %q (token %d) has ended already: %w", l.Key(), l.Token(), l.Err())
	default:
	}
	s.watch(lk.c, l)
	s.record(Event{At: s.since(time.Now()), Client: lk.c.name, What: "fault: Lose", Key: lk.key, Token: lk.token, Note: cause.String()})
	why := fmt.Errorf("dlocktest: the test made the store lose the lock (%v)", cause)
	var kind driver.LossKind
	var heldUntil time.Time
	switch cause {
	case dlock.CauseRefused:
		lk.storeFree("dropped by the store (Lose, refused)")
		return nil
	case dlock.CauseDeleted:
		kind = driver.LossDeleted
	case dlock.CauseSession:
		kind = driver.LossSession
	case dlock.CauseExpired:
		kind = driver.LossExpired
	case dlock.CauseUnreachable:
		kind = driver.LossSilent
		lk.mu.Lock()
		heldUntil = lk.expires
		lk.mu.Unlock()
	default:
		return fmt.Errorf("dlocktest: Lose: cause %v is none of expired, unreachable, refused, deleted, session ended", cause)
	}
	lk.report(&driver.LossError{Kind: kind, HeldUntil: heldUntil, Err: why})
	t := time.NewTimer(loseWait)
	defer t.Stop()
	var err error
	select {
	case <-l.Done():
	case <-t.C:
		err = fmt.Errorf("dlocktest: Lose: the lease of %q (token %d) was told of its loss and did not end within %v", l.Key(), l.Token(), loseWait)
	}
	if cause != dlock.CauseUnreachable {
		lk.storeFree("freed by the store (Lose, " + cause.String() + ")")
	}
	return err
}

// TakeOver makes the store drop stale's lock without a word — as if its TTL had
// run out on the store's clock while its holder was paused, or its clock ran
// slow — and has by acquire the key (by.Acquire with opts, behind any waiters of
// the key). stale's holder is not told: its lease looks valid until its next
// Refresh or Release (CauseRefused) or its deadline, and meanwhile by holds the
// lock — the window in which only a fencing check on the resource (a fenced
// Resource) stops the stale holder's writes. stale must be a mutex's lease
// (Acquire, TryAcquire); for the other kinds use Lose with dlock.CauseRefused,
// then acquire. Errors: those of Lose and of by's Acquire.
func (s *Store) TakeOver(ctx context.Context, stale dlock.Lease, by *Client, opts ...dlock.Option) (dlock.Lease, error) {
	if lk := s.lockOf(stale); lk != nil && lk.kind != "" {
		return nil, fmt.Errorf("dlocktest: TakeOver: the lease of %q is a %s, not a mutex's: use Lose(lease, dlock.CauseRefused), then acquire it", stale.Key(), lk.kind)
	}
	if err := s.Lose(stale, dlock.CauseRefused); err != nil {
		return nil, err
	}
	return by.Acquire(ctx, stale.Key(), opts...)
}

// Hang makes the store stop answering, as a paused server does: every call of
// every client waits until Resume, or until its context ends (it then returns the
// context's error, and its request is not run). Calls already at the store finish,
// and their replies wait for Resume. Hang on a hung store does nothing.
func (s *Store) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung == nil {
		s.hung = make(chan struct{})
		s.history = append(s.history, Event{At: s.since(time.Now()), What: "fault: Hang"})
	}
}

// Resume makes a hung store answer again: the calls waiting for it go on.
func (s *Store) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
		s.history = append(s.history, Event{At: s.since(time.Now()), What: "fault: Resume"})
	}
}

// Partition cuts the client off from the store until Heal: its calls wait for an
// answer until Heal (then they go on) or until their context ends (they return the
// context's error, and the request is not run); replies on their way wait too. An
// auto-renewed lease of the client ends at its validity deadline with
// dlock.CauseUnreachable, and the store frees the lock at its TTL, when another
// client can have it.
func (c *Client) Partition() {
	c.mu.Lock()
	cut := c.cut == nil
	if cut {
		c.cut = make(chan struct{})
	}
	c.mu.Unlock()
	if cut {
		c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: Partition"})
	}
}

// Heal ends the client's partition.
func (c *Client) Heal() {
	c.mu.Lock()
	cut := c.cut
	c.cut = nil
	c.mu.Unlock()
	if cut != nil {
		close(cut)
		c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: Heal"})
	}
}

// FailRefreshes makes the client's next n refreshes (Lease.Refresh and automatic
// renewals) fail at once with ErrFault, without reaching the store. An
// auto-renewed lease tries again soon (every twelfth of its TTL); when none gets
// through before its deadline it ends with dlock.CauseUnreachable. n replaces
// what was left of an earlier FailRefreshes; 0 ends it.
func (c *Client) FailRefreshes(n int) {
	c.mu.Lock()
	c.failRefreshes = n
	c.mu.Unlock()
	c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: FailRefreshes", Note: fmt.Sprint(n)})
}

// LoseReplies makes the store's replies to the client's next n calls get lost: the
// store does what was asked (grants, refreshes, releases), and the call fails with
// ErrFault. A grant whose reply was lost stays on the store until its TTL ends; a
// release whose reply was lost has freed the lock, and a Release tried again
// succeeds (the store's release is idempotent for its owner, as Redis's script
// makes it): the lease ends with ErrReleased, not as lost. n replaces what was left of an earlier LoseReplies; 0 ends it.
func (c *Client) LoseReplies(n int) {
	c.mu.Lock()
	c.loseReplies = n
	c.mu.Unlock()
	c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: LoseReplies", Note: fmt.Sprint(n)})
}

// DelayGrants makes every grant the store makes to the client reach it d later
// (0 ends it): the lease has that much less of its TTL left (the lease core counts
// from before the request), and a grant later than its validity is given back.
// A wait that ends meanwhile gives the grant back too.
func (c *Client) DelayGrants(d time.Duration) {
	c.mu.Lock()
	c.grantDelay = d
	c.mu.Unlock()
	c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: DelayGrants", Note: d.String()})
}

// Drift makes the client's clock run at rate times the store's from now on: the
// TTLs it asks for (grants, refreshes, renewals) last rate × TTL on the store.
// Below 1 its clock is slow, and the store frees its locks before its leases'
// validity deadlines once 1 − rate exceeds the drift allowance the lease core
// keeps (driver.StandardDrift: 1% of the TTL plus 2ms) — another client can then
// be granted a lock this one still believes it holds. Above 1 its leases end
// early on its side, which is safe. 1 undoes it. It panics if rate is not
// positive.
func (c *Client) Drift(rate float64) {
	if !(rate > 0) {
		panic(fmt.Sprintf("dlocktest: Drift(%v): the rate must be positive", rate))
	}
	c.mu.Lock()
	c.rate = rate
	c.mu.Unlock()
	c.s.record(Event{At: c.s.since(time.Now()), Client: c.name, What: "fault: Drift", Note: fmt.Sprint(rate)})
}
