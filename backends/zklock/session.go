package zklock

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock/driver"
)

// The session watch: a held lock ends when its node is deleted, when its session
// expires, or when the client stays disconnected past lostAfter (monitor).

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
					l.lose(driver.LossSession, fmt.Errorf("cannot watch lock node %s: %w", l.path, gerr), true)
					return
				}
			}
			l.mu.Lock()
			ours := l.unlocking && errors.Is(err, errNodeDeleted)
			l.mu.Unlock()
			if !ours {
				kind := driver.LossSession // the session expired, or the connection closed
				if errors.Is(err, errNodeDeleted) {
					kind = driver.LossDeleted
				}
				l.lose(kind, err, false)
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
	d.setLastUp(lastUp)
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
			d.setLastUp(now)
			sid := d.conn.SessionID()
			for _, l := range locks {
				if l.owner != sid {
					l.lose(driver.LossSession, fmt.Errorf("%w (session %#x replaced by %#x)", zk.ErrSessionExpired, l.owner, sid), false)
				}
			}
			continue
		}
		if down := now.Sub(lastUp); down >= d.lostAfter() {
			for _, l := range locks {
				// Nothing was reported: the ensemble may expire the session from now on.
				l.lose(driver.LossSilent, fmt.Errorf("disconnected from ZooKeeper for %v (session timeout %v): the session may have expired",
					down.Round(time.Millisecond), d.sessionTimeout()), true)
			}
		}
	}
}

// setLastUp records when the monitor last saw the client with its session.
func (d *zkDriver) setLastUp(t time.Time) {
	d.mu.Lock()
	d.lastUp = t
	d.mu.Unlock()
}

// SessionDeadline is, while the client has no session, the moment at which the
// ensemble may expire it and this lock's lease ends: lostAfter after the monitor
// last saw the session (driver.SessionDeadline). Lost closes then at the latest
// (within one poll of the monitor).
func (l *zkLock) SessionDeadline() (time.Time, bool) {
	d := l.d
	if d.conn.State() == zk.StateHasSession {
		return time.Time{}, false
	}
	d.mu.Lock()
	up := d.lastUp
	d.mu.Unlock()
	if up.IsZero() {
		return time.Time{}, false
	}
	return up.Add(d.lostAfter()), true
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
	return max(t/3-driver.StandardDrift(t), 0)
}
