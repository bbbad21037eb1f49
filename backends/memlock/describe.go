package memlock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List): the Store knows everything — each grant's
// token, when it was granted, its expiry, the Holder record it was taken with, and
// every queued waiter — and is read under its mutex, one consistent view. A grant is
// named by its token ("lease #N"), a waiter by the order it queued in ("waiter #N").

var _ driver.Describer = (*memDriver)(nil)

func (d *memDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.describe(key, time.Now()), nil
}

func (d *memDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[string]bool{}
	add := func(name string) {
		if strings.HasPrefix(name, prefix) {
			names[name] = true
		}
	}
	for k := range s.locks {
		if name, ok := strings.CutPrefix(k, electionKey("")); ok {
			add(name)
		} else {
			add(k)
		}
	}
	for k := range s.queues {
		add(k)
	}
	for k := range s.prims {
		add(k)
	}
	var out []driver.KeyState
	now := time.Now()
	for _, name := range slices.Sorted(maps.Keys(names)) {
		out = append(out, s.describe(name, now)...)
	}
	return out, nil
}

// describe returns what the Store holds on key; the caller holds s.mu.
func (s *Store) describe(key string, now time.Time) []driver.KeyState {
	var out []driver.KeyState
	lock := driver.KeyState{Key: key, Kind: driver.KindLock, Queue: true}
	if e, ok := s.held(key, now); ok {
		lock.Holders = []driver.Entry{grantEntry(e.owner.token, e.owner.validFrom, e.expires.Sub(now), e.owner.holder)}
	}
	for _, w := range s.queues[key] {
		lock.Waiters = append(lock.Waiters, waiterEntry(w.id, w.since, w.holder))
	}
	if len(lock.Holders)+len(lock.Waiters) > 0 {
		out = append(out, lock)
	}
	if p := s.prims[key]; p != nil {
		ps := driver.KeyState{Key: key, Kind: driver.KindSemaphore, Limit: p.limit, Queue: true}
		if p.kind == kindRW {
			ps.Kind, ps.Limit = driver.KindRWLock, 0
		}
		for lk, exp := range p.holders {
			if now.Before(exp) {
				e := grantEntry(lk.token, lk.validFrom, exp.Sub(now), lk.holder)
				e.Shared = p.kind == kindRW && lk.shared
				ps.Holders = append(ps.Holders, e)
			}
		}
		for _, w := range p.queue {
			e := waiterEntry(w.id, w.since, w.holder)
			e.Shared = p.kind == kindRW && w.shared
			ps.Waiters = append(ps.Waiters, e)
		}
		if len(ps.Holders)+len(ps.Waiters) > 0 {
			out = append(out, ps)
		}
	}
	if t := s.terms[key]; t != nil {
		if e, ok := s.held(electionKey(key), now); ok && e.owner == t.current {
			leader := grantEntry(e.owner.token, e.owner.validFrom, e.expires.Sub(now), nil)
			leader.Value = t.value
			out = append(out, driver.KeyState{Key: key, Kind: driver.KindElection, Holders: []driver.Entry{leader}})
		}
	}
	return out
}

func grantEntry(token uint64, since time.Time, ttl time.Duration, h *driver.Holder) driver.Entry {
	return driver.Entry{Owner: fmt.Sprintf("lease #%d", token), Token: token, Since: since, TTL: ttl, Holder: h}
}

func waiterEntry(id uint64, since time.Time, h *driver.Holder) driver.Entry {
	return driver.Entry{Owner: fmt.Sprintf("waiter #%d", id), Since: since, Holder: h}
}
