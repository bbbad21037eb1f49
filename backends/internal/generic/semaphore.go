// Package generic builds primitives out of a backend's mutexes, for backends whose
// store has no native form of them. What it builds is marked generic in the
// backend's declaration (spec.Primitive.Native false) and documentation, with the
// limits stated here.
package generic

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// MaxLimit is the largest limit of a generic semaphore: an attempt on a full
// semaphore asks every slot, so the limit is kept small.
const MaxLimit = 64

// Semaphore is the generic counting semaphore: limit mutexes ("slots") per key, a
// permit being one slot held. It implements driver.Semaphorer for the Driver it
// wraps; a backend embeds it in its own driver.
//
// An attempt asks the slots one after another, from a random one, until one is
// granted: one request when the semaphore has a free slot near the start, limit
// requests when it is full. Safety is the slots' mutual exclusion: never more than
// limit holders, as long as every client uses the same limit.
//
// Not guaranteed (what a mutex store cannot do):
//   - limits are not compared: the store keeps no limit, so a client with another
//     limit uses more or fewer slots and is not told (spec.SemaphoreConflict is a
//     declared weakness of every backend that uses it);
//   - no fencing: tokens are 0 (a slot's token counts that slot only);
//   - no order and no wake-ups: waiters retry by their retry strategy (each wait is
//     cut to the slots' shortest remaining TTL where the store tells it), and a late
//     one may be served first.
type Semaphore struct {
	D driver.Driver
}

// SlotKey is the mutex key of slot i of key's semaphore: not valid UTF-8, so never
// the key of a user's mutex, and distinct for every (key, i).
func SlotKey(key string, i int) string {
	return "\xffsemaphore\xff" + strconv.Itoa(i) + "\xff" + key
}

// TryLockSemaphore takes a free slot of key's semaphore, or returns Busy with the
// shortest remaining time the store reported for the held slots.
func (s Semaphore) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	if limit > MaxLimit {
		return nil, fmt.Errorf("%w: %d: a generic semaphore has at most %d slots", dlock.ErrInvalidLimit, limit, MaxLimit)
	}
	start := rand.IntN(limit)
	var remaining time.Duration
	for i := range limit {
		lk, err := s.D.TryLock(ctx, SlotKey(key, (start+i)%limit), ttl)
		var busy *driver.BusyError
		switch {
		case err == nil:
			return wrap(lk), nil
		case !errors.As(err, &busy):
			return nil, err
		case busy.Remaining > 0 && (remaining == 0 || busy.Remaining < remaining):
			remaining = busy.Remaining
		}
	}
	return nil, driver.Busy(remaining)
}

// slot is a held slot: the slot's lock with token 0.
type slot struct{ driver.Lock }

func (slot) Token() uint64 { return 0 }

// sessionedSlot keeps the Sessioned side of a slot whose store can take it away.
type sessionedSlot struct {
	slot
	driver.Sessioned
}

// SessionDeadline passes the slot's session deadline on (driver.SessionDeadline).
func (s sessionedSlot) SessionDeadline() (time.Time, bool) {
	if sd, ok := s.Sessioned.(driver.SessionDeadline); ok {
		return sd.SessionDeadline()
	}
	return time.Time{}, false
}

func wrap(lk driver.Lock) driver.Lock {
	if s, ok := lk.(driver.Sessioned); ok {
		return sessionedSlot{slot{lk}, s}
	}
	return slot{lk}
}

// SlotKeys returns the mutex keys of every slot a semaphore named key may use
// (SlotKey of 0 to MaxLimit-1): what an inspection reads, since the store keeps no
// limit.
func SlotKeys(key string) []string {
	keys := make([]string, MaxLimit)
	for i := range keys {
		keys[i] = SlotKey(key, i)
	}
	return keys
}

// SemaphoreOf returns the semaphore named key as an inspection shows it: the slots'
// holders (held reports slot i's, ok false when it is free), with no limit (the
// store keeps none) and no token. ok is false when no slot is held.
func SemaphoreOf(key string, held func(i int) (driver.Entry, bool)) (driver.KeyState, bool) {
	st := driver.KeyState{Key: key, Kind: driver.KindSemaphore, Note: "generic semaphore: its limit is not recorded"}
	for i := range MaxLimit {
		if e, ok := held(i); ok {
			e.Token = 0
			st.Holders = append(st.Holders, e)
		}
	}
	return st, len(st.Holders) > 0
}

// ParseSlotKey returns the semaphore's key of a slot's mutex key (SlotKey); ok is
// false for any other key.
func ParseSlotKey(k string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(k, "\xffsemaphore\xff")
	if !ok {
		return "", false
	}
	digits, key, ok := strings.Cut(rest, "\xff")
	if _, err := strconv.Atoi(digits); !ok || err != nil {
		return "", false
	}
	return key, true
}

// NoRoom reports whether the live holders of a semaphore or read-write lock leave
// no room for one more lease: a semaphore's when they number limit or more; a
// read-write lock's exclusive (write) lease when there is any; a shared one when
// any of them is exclusive.
func NoRoom[H any](semaphore bool, limit int, exclusive bool, live []H, isExclusive func(H) bool) bool {
	switch {
	case semaphore:
		return len(live) >= limit
	case exclusive:
		return len(live) > 0
	}
	return slices.ContainsFunc(live, isExclusive)
}
