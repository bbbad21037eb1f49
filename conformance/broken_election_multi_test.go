package conformance_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/spec"
)

// The flawed store's elections and sets of keys, each with flaws of its own, so
// that TestSuiteCatchesFlaws shows every property of the primitives failing too.

const (
	twoLeaders      flaw = "two-leaders"       // two candidates may lead at once
	observeSkips    flaw = "observe-skips"     // observers are told every other term only
	leaderStays     flaw = "leader-stays"      // a term never expires
	slowResign      flaw = "slow-resign"       // a resigned term stays held for 1.5s
	setIgnoresMutex flaw = "set-ignores-mutex" // sets lock keys of their own, not the mutexes'
	partialSet      flaw = "partial-set"       // a failed set attempt leaves the keys it took
	setLeaks        flaw = "set-leaks"         // ... and they never expire
)

func init() {
	maps.Copy(flaws, map[flaw]spec.Property{
		twoLeaders:      spec.ElectionSingleLeader,
		observeSkips:    spec.ElectionObserve,
		leaderStays:     spec.ElectionFailover,
		slowResign:      spec.ElectionResign,
		setIgnoresMutex: spec.MultiKeyExclusion,
		partialSet:      spec.MultiKeyAllOrNothing,
		setLeaks:        spec.MultiKeyDeadlockFreedom,
	})
}

// electionPrefix starts the store key of an election's term.
const electionPrefix = "\xffelection\xff"

// limit is how many owners may hold key at once; the caller holds s.mu.
func (s *flawedStore) limit(key string) int {
	if s.flaw == twoHolders || s.flaw == twoLeaders && strings.HasPrefix(key, electionPrefix) {
		return 2
	}
	return 1
}

// neverExpires reports whether key's locks ignore their TTL.
func (s *flawedStore) neverExpires(key string) bool {
	return s.flaw == neverExpires || s.flaw == leaderStays && strings.HasPrefix(key, electionPrefix)
}

// flawedTerms records one election's terms.
type flawedTerms struct {
	log     []driver.Leader
	owners  map[*flawedLock]string // value of each term's lock
	changed chan struct{}
}

func (s *flawedStore) election(name string) *flawedTerms {
	e := s.terms[name]
	if e == nil {
		e = &flawedTerms{owners: map[*flawedLock]string{}, changed: make(chan struct{})}
		s.terms[name] = e
	}
	return e
}

func (d flawedDriver) TryCampaign(ctx context.Context, name, value string, ttl time.Duration) (driver.Lock, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	lk, err := s.tryLocked(electionPrefix+name, ttl)
	if err != nil {
		return nil, err
	}
	e := s.election(name)
	e.owners[lk] = value
	e.log = append(e.log, driver.Leader{Value: value, Token: lk.token})
	close(e.changed)
	e.changed = make(chan struct{})
	if s.flaw == slowResign {
		return slowTerm{lk}, nil
	}
	return lk, nil
}

// slowTerm is a term whose resignation leaves it held for a while.
type slowTerm struct{ *flawedLock }

func (l slowTerm) Unlock(ctx context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.find() < 0 {
		return dlock.ErrNotHeld
	}
	l.expires = time.Now().Add(1500 * time.Millisecond)
	return nil
}

func (d flawedDriver) Leader(ctx context.Context, name string) (driver.Leader, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.election(name)
	for _, l := range s.locks[electionPrefix+name] {
		if l.find() >= 0 {
			return driver.Leader{Value: e.owners[l], Token: l.token}, nil
		}
	}
	return driver.Leader{}, fmt.Errorf("%w: election %q", dlock.ErrNoLeader, name)
}

func (d flawedDriver) WatchLeaders(ctx context.Context, name string, after uint64, found func(driver.Leader)) error {
	if l, err := d.Leader(ctx, name); err == nil && l.Token > after {
		found(l)
		after = l.Token
	}
	s := d.s
	for {
		s.mu.Lock()
		e := s.election(name)
		var next []driver.Leader
		for i, t := range e.log {
			if t.Token > after && (s.flaw != observeSkips || i%2 == 1) {
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

// TryLockAll takes every key or none in one step — unless the store is flawed.
func (d flawedDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	set := flawedSet{s: s}
	for _, k := range keys {
		if s.flaw == setIgnoresMutex {
			k = "set\xff" + k
		}
		lk, err := s.tryLocked(k, ttl)
		if err != nil {
			switch s.flaw {
			case partialSet:
			case setLeaks:
				for _, l := range set.locks {
					l.expires = time.Now().Add(time.Hour)
				}
			default:
				for _, l := range set.locks {
					l.unlockLocked()
				}
			}
			return nil, err
		}
		set.locks = append(set.locks, lk)
	}
	return set, nil
}

// flawedSet is the lock of a set of keys.
type flawedSet struct {
	s     *flawedStore
	locks []*flawedLock
}

func (f flawedSet) Tokens() []uint64 {
	var ts []uint64
	for _, l := range f.locks {
		ts = append(ts, l.token)
	}
	return ts
}

func (f flawedSet) Token() uint64 {
	var t uint64
	for _, l := range f.locks {
		t = max(t, l.token)
	}
	return t
}

func (f flawedSet) Refresh(ctx context.Context, ttl time.Duration) error {
	for _, l := range f.locks {
		if err := l.Refresh(ctx, ttl); err != nil {
			_ = f.Unlock(ctx)
			return err
		}
	}
	return nil
}

func (f flawedSet) Unlock(ctx context.Context) error {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	var err error
	for _, l := range f.locks {
		if !l.unlockLocked() {
			err = dlock.ErrNotHeld
		}
	}
	return err
}
