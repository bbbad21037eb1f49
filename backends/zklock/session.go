package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// zkLock is one held lock: our node, lowest in its directory.
type zkLock struct {
	d     *zkDriver
	path  string
	token uint64 // the node's creation zxid
	owner int64  // the session that owns the node

	lost     chan struct{}
	lostOnce sync.Once
	cause    error // set before lost is closed

	mu        sync.Mutex
	unlocking bool          // a delete of ours was sent: its NodeDeleted event is no loss
	unlocked  chan struct{} // closed when a delete of ours succeeded
	deleting  chan struct{} // the delete in flight (retried while disconnected), closed when it ended
	delErr    error         // its result
	waiting   int           // Unlock calls waiting for it
	ambiguous bool          // an earlier delete's fate is unknown (connection lost)
}

var _ driver.Sessioned = (*zkLock)(nil)

func (l *zkLock) Token() uint64 { return l.token }

// Refresh is not supported: the lock lasts as long as the session.
func (l *zkLock) Refresh(context.Context, time.Duration) error {
	return fmt.Errorf("zookeeper locks last as long as the session: %w", errors.ErrUnsupported)
}

// Lost is closed when the session ended, the node was deleted, the connection was
// closed, or the client was disconnected for as long as its session may live.
func (l *zkLock) Lost() <-chan struct{} { return l.lost }

// Cause says why Lost closed.
func (l *zkLock) Cause() error {
	select {
	case <-l.lost:
		return l.cause
	default:
		return nil
	}
}

// Unlock deletes our node. A delete that fails because the connection dropped is
// sent again once the client is connected (within the session), until it gets an
// answer or the Locker closes; one whose answer was lost is not taken for someone
// else's: if the node is then found gone while the session lives, ours did it.
// When ctx ends first, Unlock returns ctx's error and the delete goes on: if it
// succeeds with no Unlock waiting, the lease ends (Lost) then, so a caller that gave
// up on Release does not keep the lock for the rest of the session.
func (l *zkLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.deleting == nil {
		l.unlocking = true
		l.deleting = make(chan struct{})
		go l.delete(l.deleting)
	}
	deleting := l.deleting
	l.waiting++
	l.mu.Unlock()
	select {
	case <-deleting:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting--
	select {
	case <-deleting:
		return l.outcome()
	default:
		return ctx.Err()
	}
}

// delete deletes our node, retrying while the ensemble is out of reach, records the
// result and closes done. If no Unlock waits for it any longer, it ends the lease.
func (l *zkLock) delete(done chan struct{}) {
	err := l.d.settle(func() error {
		err := l.d.conn.Delete(l.path, -1)
		if transient(err) {
			l.mu.Lock()
			l.ambiguous = true
			l.mu.Unlock()
		}
		return err
	})
	l.mu.Lock()
	if errors.Is(err, zk.ErrNoNode) && l.ambiguous && l.d.conn.SessionID() == l.owner {
		err = nil // an earlier try went through; its answer was lost
	}
	l.delErr = err
	close(done)
	// Nobody waits for the answer: a node that is gone ends the lease now (other
	// errors leave it held, for a later Release to try again).
	gone := l.waiting == 0 && (err == nil || errors.Is(err, zk.ErrNoNode))
	var cause error
	if gone {
		cause = l.outcome()
	}
	l.mu.Unlock()
	if gone {
		if cause == nil {
			cause = errors.New("deleted after Release had stopped waiting")
		}
		l.lose(fmt.Errorf("zklock: lock node %s: %w", l.path, cause), false)
	}
}

// outcome turns the finished delete's result into Unlock's; the caller holds l.mu.
func (l *zkLock) outcome() error {
	err := l.delErr
	switch {
	case err == nil:
		l.released()
		return nil
	case errors.Is(err, zk.ErrNoNode):
		l.released()
		return fmt.Errorf("%w: lock node %s is gone", dlock.ErrNotHeld, l.path)
	}
	l.deleting = nil // the Locker is closing (or the error is lasting): a later Unlock tries again
	return fmt.Errorf("delete %s: %w", l.path, err)
}

// released ends the lock's bookkeeping after its node is gone; the caller holds l.mu.
func (l *zkLock) released() {
	select {
	case <-l.unlocked:
	default:
		close(l.unlocked)
	}
	l.d.forget(l)
}

// lose reports the lock lost. When the session may live on (the client was only
// disconnected), its node is deleted once the ensemble answers again, so that a
// lease that ended does not keep the lock.
func (l *zkLock) lose(cause error, deleteNode bool) {
	l.lostOnce.Do(func() {
		l.cause = cause
		close(l.lost)
		l.d.forget(l)
		if deleteNode {
			go l.d.discard(l.path)
		}
	})
}

// hold turns our lowest node into a held lock and starts watching it.
func (d *zkDriver) hold(path string, st *zk.Stat, ev <-chan zk.Event) *zkLock {
	l := &zkLock{d: d, path: path, token: uint64(st.Czxid), owner: st.EphemeralOwner,
		lost: make(chan struct{}), unlocked: make(chan struct{})}
	d.mu.Lock()
	d.held[l] = struct{}{}
	if !d.monitoring && !d.closed {
		d.monitoring = true
		go d.monitor()
	}
	d.mu.Unlock()
	go l.watch(ev)
	return l
}

func (d *zkDriver) forget(l *zkLock) {
	d.mu.Lock()
	delete(d.held, l)
	d.mu.Unlock()
}

// watch follows the watch on our node until the lock ends.
func (l *zkLock) watch(ev <-chan zk.Event) {
	for {
		select {
		case e := <-ev:
			gone, err := ownNodeEnded(e)
			if !gone { // data written to our node: watch again
				var gerr error
				_, _, ev, gerr = l.d.conn.GetW(l.path)
				if gerr == nil {
					continue
				}
				gone, err = errors.Is(gerr, zk.ErrNoNode), gerr
				if !gone {
					l.lose(fmt.Errorf("cannot watch lock node %s: %w", l.path, gerr), true)
					return
				}
			}
			l.mu.Lock()
			ours := l.unlocking && errors.Is(err, errNodeDeleted)
			l.mu.Unlock()
			if !ours {
				l.lose(err, false)
			}
			return
		case <-l.unlocked:
			return
		case <-l.lost:
			return
		}
	}
}

// monitor watches the connection while locks are held. go-zookeeper only learns
// that its session expired when it reaches a server again, so a client cut off
// from the ensemble must give its locks up by its own clock.
func (d *zkDriver) monitor() {
	t := d.sessionTimeout()
	poll := min(max(t/100, 2*time.Millisecond), 20*time.Millisecond)
	if t == 0 {
		poll = 10 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	lastUp := time.Now()
	for {
		select {
		case <-d.done:
			d.mu.Lock()
			d.monitoring = false
			d.mu.Unlock()
			return
		case <-tick.C:
		}
		d.mu.Lock()
		if len(d.held) == 0 {
			d.monitoring = false
			d.mu.Unlock()
			return
		}
		locks := make([]*zkLock, 0, len(d.held))
		for l := range d.held {
			locks = append(locks, l)
		}
		d.mu.Unlock()

		now := time.Now()
		if d.conn.State() == zk.StateHasSession {
			lastUp = now
			sid := d.conn.SessionID()
			for _, l := range locks {
				if l.owner != sid {
					l.lose(fmt.Errorf("%w (session %#x replaced by %#x)", zk.ErrSessionExpired, l.owner, sid), false)
				}
			}
			continue
		}
		if down := now.Sub(lastUp); down >= d.lostAfter() {
			for _, l := range locks {
				l.lose(fmt.Errorf("disconnected from ZooKeeper for %v (session timeout %v): the session may have expired",
					down.Round(time.Millisecond), d.sessionTimeout()), true)
			}
		}
	}
}

// lostAfter is how long a disconnected holder keeps its leases: the ensemble
// expires a session one timeout after it last heard from the client, and
// go-zookeeper notices a silent link only after two thirds of the timeout, so a
// third of it (minus drift) after the client last had its session is the earliest
// the lock may have gone.
func (d *zkDriver) lostAfter() time.Duration {
	t := d.sessionTimeout()
	if t == 0 {
		return 0
	}
	return max(t/3-driver.DefaultDrift(t), 0)
}
