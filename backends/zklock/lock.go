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

// zkDriver is one Locker's client of the ensemble.
type zkDriver struct {
	conn *zk.Conn
	cfg  config

	mu         sync.Mutex
	held       map[*zkLock]struct{}
	monitoring bool
	lastUp     time.Time // when the monitor last saw the client with its session
	closed     bool
	done       chan struct{} // closed by Close
}

func (d *zkDriver) TryLock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return asLock(d.acquire(ctx, LockDir(d.cfg.root, key), lockInfix, holderData(ctx), false, mutexRule, nil))
}

// Lock queues for key and waits until every node before ours is gone.
func (d *zkDriver) Lock(ctx context.Context, key string, _ time.Duration) (driver.Lock, error) {
	return asLock(d.acquire(ctx, LockDir(d.cfg.root, key), lockInfix, holderData(ctx), true, mutexRule, nil))
}

// asLock returns lk as a driver.Lock, or no Lock at all with an error.
func asLock(lk *zkLock, err error) (driver.Lock, error) {
	if err != nil {
		return nil, err
	}
	return lk, nil
}

func (d *zkDriver) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.done)
	}
	d.mu.Unlock()
	if d.cfg.closeConn {
		d.conn.Close()
	}
	return nil
}

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
		l.lose(driver.LossDeleted, fmt.Errorf("lock node %s: %w", l.path, cause), false)
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

// lose reports the lock lost (kind: how it was learnt, see driver.LossError). When
// the session may live on (the client was only disconnected), its node is deleted
// once the ensemble answers again, so that a lease that ended does not keep the lock.
func (l *zkLock) lose(kind driver.LossKind, cause error, deleteNode bool) {
	l.lostOnce.Do(func() {
		l.cause = &driver.LossError{Kind: kind, Err: cause}
		close(l.lost)
		l.d.forget(l)
		if deleteNode {
			go l.d.discard(l.path)
		}
	})
}
