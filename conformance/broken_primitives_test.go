package conformance_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/spec"
)

// The primitives' properties must be able to fail too. primStore is a small
// in-memory store of semaphores and read-write locks (no queue, so no writer
// preference) with one deliberate flaw; TestSuiteCatchesPrimitiveFlaws runs the
// suite on it in a child test process, as TestSuiteCatchesFlaws does for the mutex.

const (
	semOvergrants   flaw = "semaphore-overgrants"    // limit+1 permits
	semSerial       flaw = "semaphore-serial"        // one permit whatever the limit
	semNeverExpires flaw = "semaphore-never-expires" // permits ignore their TTL
	semIgnoresLimit flaw = "semaphore-ignores-limit" // another limit, or a read-write lock, is not refused
	semSameToken    flaw = "semaphore-same-token"    // every permit gets token 1
	rwReadersAlone  flaw = "rw-readers-alone"        // shared leases exclude each other
	rwWriterShares  flaw = "rw-writer-shares"        // an exclusive lease is granted beside shared ones
	rwNeverExpires  flaw = "rw-never-expires"        // leases ignore their TTL
	rwIgnoresKind   flaw = "rw-ignores-kind"         // a semaphore on the key is not refused
	rwReaderBarging flaw = "rw-reader-barging"       // no writer preference: readers pass a waiting writer
)

var primFlaws = map[flaw]spec.Property{
	semOvergrants:   spec.SemaphoreBound,
	semSerial:       spec.SemaphoreBound,
	semNeverExpires: spec.SemaphorePermitReturns,
	semIgnoresLimit: spec.SemaphoreConflict,
	semSameToken:    spec.SemaphoreFencing,
	rwReadersAlone:  spec.RWExclusion,
	rwWriterShares:  spec.RWExclusion,
	rwNeverExpires:  spec.RWLeaseReturns,
	rwIgnoresKind:   spec.RWConflict,
	rwReaderBarging: spec.WriterProgress,
}

type primStore struct {
	flaw  flaw
	mu    sync.Mutex
	keys  map[string]*primEntry
	token uint64
}

type primEntry struct {
	kind    string // "semaphore" or "rw"
	limit   int
	holders map[*primHold]time.Time
}

type primHold struct {
	s         *primStore
	key       string
	exclusive bool
	token     uint64
}

type primDriver struct{ s *primStore }

func (d primDriver) Close() error { return nil }

func (d primDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	return nil, fmt.Errorf("primStore has no mutex")
}

// live drops expired holders of key's entry (unless the flaw keeps them) and
// returns it, or a new one for kind and limit when it is empty.
func (s *primStore) live(key, kind string, limit int) *primEntry {
	now := time.Now()
	e := s.keys[key]
	if e != nil {
		for h, exp := range e.holders {
			if !now.Before(exp) && s.flaw != semNeverExpires && s.flaw != rwNeverExpires {
				delete(e.holders, h)
			}
		}
	}
	if e == nil || len(e.holders) == 0 {
		e = &primEntry{kind: kind, limit: limit, holders: map[*primHold]time.Time{}}
		s.keys[key] = e
	}
	return e
}

func (s *primStore) grant(e *primEntry, key string, exclusive bool, ttl time.Duration) *primHold {
	s.token++
	h := &primHold{s: s, key: key, exclusive: exclusive, token: s.token}
	if s.flaw == semSameToken {
		h.token = 1
	}
	e.holders[h] = time.Now().Add(ttl)
	return h
}

func (d primDriver) TryLockSemaphore(ctx context.Context, key string, limit int, ttl time.Duration) (driver.Lock, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key, "semaphore", limit)
	if (e.kind != "semaphore" || e.limit != limit) && s.flaw != semIgnoresLimit {
		return nil, fmt.Errorf("%w: %s with limit %d", dlock.ErrConflict, e.kind, e.limit)
	}
	switch {
	case s.flaw == semOvergrants:
		limit++
	case s.flaw == semSerial:
		limit = 1
	}
	if len(e.holders) >= limit {
		return nil, driver.Busy(0)
	}
	return s.grant(e, key, false, ttl), nil
}

func (d primDriver) TryLockRW(ctx context.Context, key string, shared bool, ttl time.Duration) (driver.Lock, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.live(key, "rw", 0)
	if e.kind != "rw" && s.flaw != rwIgnoresKind {
		return nil, fmt.Errorf("%w: %s", dlock.ErrConflict, e.kind)
	}
	for h := range e.holders {
		switch {
		case h.exclusive && s.flaw != rwWriterShares, !shared && s.flaw != rwWriterShares, s.flaw == rwReadersAlone:
			return nil, driver.Busy(0)
		}
	}
	return s.grant(e, key, !shared, ttl), nil
}

func (h *primHold) Token() uint64 { return h.token }

func (h *primHold) own() (*primEntry, bool) {
	e := h.s.keys[h.key]
	if e == nil {
		return nil, false
	}
	exp, ok := e.holders[h]
	return e, ok && (time.Now().Before(exp) || h.s.flaw == semNeverExpires || h.s.flaw == rwNeverExpires)
}

func (h *primHold) Refresh(ctx context.Context, ttl time.Duration) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	e, ok := h.own()
	if !ok {
		return dlock.ErrNotHeld
	}
	e.holders[h] = time.Now().Add(ttl)
	return nil
}

func (h *primHold) Unlock(ctx context.Context) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	e, ok := h.own()
	if e != nil {
		delete(e.holders, h)
	}
	if !ok {
		return dlock.ErrNotHeld
	}
	return nil
}

type primHarness struct {
	s    *primStore
	caps spec.Capabilities
}

func (h primHarness) NewLocker(t testing.TB) dlock.Locker {
	return dlock.New(primDriver{h.s}, driver.Info{Name: "flawed-" + string(h.s.flaw)})
}
func (h primHarness) Capabilities() spec.Capabilities { return h.caps }
func (h primHarness) Name() string                    { return "flawed-" + string(h.s.flaw) }

// memHarness runs the suite on memlock with the given capabilities: the sound
// store with writer preference that the WriterProgress flaw is compared with.
type memHarness struct {
	store *memlock.Store
	caps  spec.Capabilities
}

func (h memHarness) NewLocker(t testing.TB) dlock.Locker {
	return memlock.New(memlock.WithStore(h.store))
}
func (h memHarness) Capabilities() spec.Capabilities { return h.caps }
func (h memHarness) Name() string                    { return "mem (primitives)" }

// TestFlawedPrimitiveSuite runs the suite on the primStore with the flaw
// DLOCK_PRIM_FLAW (declaring the property DLOCK_DECLARE names as a weakness of its
// primitive). It is run by TestSuiteCatchesPrimitiveFlaws.
func TestFlawedPrimitiveSuite(t *testing.T) {
	f, ok := os.LookupEnv("DLOCK_PRIM_FLAW")
	if !ok {
		t.Skip("run by TestSuiteCatchesPrimitiveFlaws with DLOCK_PRIM_FLAW set")
	}
	// The primStore has no queue: no writer preference, a declared weakness —
	// except where WriterProgress itself is under test.
	sem := &spec.Primitive{Native: true, Fencing: true}
	rw := &spec.Primitive{Native: true, Fencing: true, Weaknesses: []spec.Property{spec.WriterProgress}}
	caps := spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, Semaphore: sem, RWLock: rw}
	declared := spec.Property(os.Getenv("DLOCK_DECLARE"))
	writer := os.Getenv("DLOCK_WRITER_PREFERENCE") == "1"
	if writer {
		rw.WriterPreference, rw.Weaknesses = true, nil
	}
	switch {
	case declared == spec.WriterProgress:
		rw.WriterPreference, rw.Weaknesses = false, []spec.Property{declared}
	case declared != "" && strings.HasPrefix(string(declared), "Semaphore"):
		sem.Weaknesses = append(sem.Weaknesses, declared)
	case declared != "":
		rw.Weaknesses = append(rw.Weaknesses, declared)
	}
	if f == "" && writer { // the sound store with writer preference
		caps.FIFO = true
		conformance.Run(t, memHarness{memlock.NewStore(), caps})
		return
	}
	conformance.Run(t, primHarness{&primStore{flaw: flaw(f), keys: map[string]*primEntry{}}, caps})
}

func TestSuiteCatchesPrimitiveFlaws(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child test processes")
	}
	for f, prop := range primFlaws {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			catches(t, "TestFlawedPrimitiveSuite", f, prop, func(fl flaw) []string {
				env := []string{"DLOCK_PRIM_FLAW=" + string(fl)}
				if prop == spec.WriterProgress {
					env = append(env, "DLOCK_WRITER_PREFERENCE=1")
				}
				return env
			})
		})
	}
}
