package memlock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Leader election: an election's term is the lock on a key of its own in the Store
// (electionKey: no mutex key can be named like it), taken by TryCampaign, or by
// Campaign, whose candidates queue as a mutex's waiters do (the first is handed the
// term when it ends or expires). The Store records each term with its value as it grants it,
// so Leader and WatchLeaders see every term, in order. An election's record goes
// once it has neither a live term nor an observer (at the term's release, the
// observer's end, or the reaping after an expiry): the Store keeps no state for
// elections gone quiet, and tokens, drawn from the Store's one counter, keep
// increasing across the gap.

// keptTerms bounds the terms a Store remembers per election for its observers: an
// observer that falls further behind than this misses the older ones.
const keptTerms = 64

// terms is what a Store knows of one election.
type terms struct {
	current  *memLock        // the latest term's lock (it may have ended since)
	value    string          // the latest term's value
	log      []driver.Leader // the latest terms, oldest first
	changed  chan struct{}   // closed (and replaced) when a term begins
	watchers int             // WatchLeaders calls under way
}

// electionPrefix starts the Store key of every election (electionKey).
const electionPrefix = "\xffelection\xff"

// electionKey is the Store key of election name: the byte 0xff never occurs in a
// valid key, so no mutex shares it.
func electionKey(name string) string { return electionPrefix + name }

// prune drops election name's record if it has no live term and no observer; the
// caller holds s.mu.
func (s *Store) prune(name string, now time.Time) {
	e := s.terms[name]
	if e == nil || e.watchers > 0 {
		return
	}
	if held, ok := s.held(electionKey(name), now); ok && held.owner == e.current {
		return
	}
	delete(s.terms, name)
}

// Elections reports how many elections the Store keeps a record of: those with a
// live term or an observer, and those whose term expired since the last reaping
// (at most a second ago, on the next grant).
func (s *Store) Elections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.terms)
}

var (
	_ driver.Elector          = (*memDriver)(nil)
	_ driver.CampaignWaiter   = (*memDriver)(nil)
	_ driver.CampaignNotifier = (*memDriver)(nil)
)

// TryCampaign takes name's term if nobody leads.
func (d *memDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	lk, err := s.try(electionKey(name), ttl, nil, time.Now())
	if err != nil {
		return nil, err
	}
	s.beginTerm(name, value, lk)
	return lk, nil
}

// Campaign waits for name's term among its candidates, in arrival order
// (driver.CampaignWaiter): a term that ends or expires goes to the first candidate
// at once, and one granted to a candidate whose wait ended goes on to the next.
func (d *memDriver) Campaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	return d.wait(ctx, electionKey(name), ttl, func(lk *memLock) { d.s.beginTerm(name, value, lk) })
}

// beginTerm records lk, just granted, as election name's term with value; the
// caller holds s.mu.
func (s *Store) beginTerm(name, value string, lk *memLock) {
	e := s.election(name)
	e.current, e.value = lk, value
	e.log = append(e.log, driver.Leader{Value: value, Token: lk.token})
	if len(e.log) > keptTerms {
		e.log = e.log[len(e.log)-keptTerms:]
	}
	close(e.changed)
	e.changed = make(chan struct{})
}

// election returns name's record; the caller holds s.mu.
func (s *Store) election(name string) *terms {
	e := s.terms[name]
	if e == nil {
		e = &terms{changed: make(chan struct{})}
		s.terms[name] = e
	}
	return e
}

// CampaignWake is the name under which Subscribe announces the end of a term.
func (d *memDriver) CampaignWake(name string) string { return electionKey(name) }

func (d *memDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.terms[name]
	if held, ok := s.held(electionKey(name), time.Now()); ok && e != nil && held.owner == e.current {
		return driver.Leader{Value: e.value, Token: e.current.token}, nil
	}
	return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
}

// WatchLeaders reports the live leader, then every term from the Store's record.
func (d *memDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	if l, err := d.Leader(ctx, name); err == nil && l.Token > after {
		found(l)
		after = l.Token
	}
	s := d.s
	s.mu.Lock()
	e := s.election(name)
	e.watchers++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		e.watchers--
		s.prune(name, time.Now())
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		var next []driver.Leader
		for _, t := range e.log {
			if t.Token > after {
				next = append(next, t)
			}
		}
		changed := e.changed
		s.mu.Unlock()
		for _, t := range next {
			found(t)
			after = t.Token
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
