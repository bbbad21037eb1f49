package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/spec"
)

// The suite must be able to fail. flawedDriver is a small in-memory lock store with
// one deliberate flaw; TestSuiteCatchesFlaws runs the suite on it in a child test
// process and demands that the matching property fails — and that declaring the
// flaw as a weakness makes the suite demand (and see) the violation instead.

type flaw string

const (
	noFlaw              flaw = ""
	releaseIgnoresOwner flaw = "release-ignores-owner" // Unlock and Refresh act on whoever holds the key
	neverExpires        flaw = "never-expires"         // TTLs are ignored
	twoHolders          flaw = "two-holders"           // up to two owners at once
	constantToken       flaw = "constant-token"        // every grant gets token 1
	barging             flaw = "barging"               // waiters poll a queued store, whoever asks first wins
	splitVotes          flaw = "split-votes"           // TryLocks of a free key that overlap in time all fail
	cancelLeavesGrant   flaw = "cancel-leaves-grant"   // a cancelled wait stays pending and takes the lock when it frees
	// The store tells a holder that its lock was deleted, but calls it the end of its
	// session: the lease's Err names the wrong cause.
	deletionCalledSession flaw = "deletion-called-session"
)

// flaws maps each flaw to the property it breaks.
var flaws = map[flaw]spec.Property{
	releaseIgnoresOwner:   spec.OwnerOnlyRelease,
	neverExpires:          spec.DeadlockFreedom,
	twoHolders:            spec.MutualExclusion,
	constantToken:         spec.FencingMonotonic,
	barging:               spec.FIFO,
	splitVotes:            spec.SimultaneousTry,
	cancelLeavesGrant:     spec.Cancellation,
	deletionCalledSession: spec.DoneAndErr,
}

// bargingLocker waits by polling TryAcquire on a memlock Store instead of queueing in
// it, so a client that asks at the right moment overtakes the waiters; it counts its
// pollers as the store's queue.
type bargingLocker struct {
	dlock.Locker
	waiting *atomic.Int64
}

func (b bargingLocker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	for {
		ls, err := b.TryAcquire(ctx, key, opts...)
		if !errors.Is(err, dlock.ErrNotAcquired) || ctx.Err() != nil {
			return ls, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Millisecond): // the flaw: a poll, not a place in the queue
		}
	}
}

// queueHarness runs the suite on memlock (a FIFO store), or with barge on
// bargingLockers over it.
type queueHarness struct {
	store   *memlock.Store
	barge   bool
	waiting *atomic.Int64
	caps    spec.Capabilities
}

func (h queueHarness) NewLocker(t testing.TB) dlock.Locker {
	l := memlock.New(memlock.WithStore(h.store))
	if h.barge {
		return bargingLocker{l, h.waiting}
	}
	return l
}

func (h queueHarness) Capabilities() spec.Capabilities { return h.caps }

func (h queueHarness) Name() string { return "mem (barging: " + strconv.FormatBool(h.barge) + ")" }

func (h queueHarness) Waiting(t testing.TB, key string) int {
	if h.barge {
		return int(h.waiting.Load())
	}
	return h.store.Waiting(key)
}

type flawedStore struct {
	flaw  flaw
	mu    sync.Mutex
	locks map[string][]*flawedLock
	token uint64
	terms map[string]*flawedTerms // per election (broken_election_multi_test.go)
	// splitVotes: the TryLocks of each key in flight, and whether they overlapped.
	trying map[string]int
	split  map[string]bool
	// cancelLeavesGrant: per key, until when a cancelled wait is still pending.
	pending map[string]time.Time
}

type flawedLock struct {
	s       *flawedStore
	key     string
	token   uint64
	expires time.Time
	lost    chan struct{} // closed when the lock is deleted (deleteKey), cause set
	cause   error
}

// newLock is a grant of key with the current token, valid until expires; the
// caller holds s.mu.
func (s *flawedStore) newLock(key string, expires time.Time) *flawedLock {
	return &flawedLock{s: s, key: key, token: s.token, expires: expires, lost: make(chan struct{})}
}

// deleteKey deletes key's locks, as an operator would, and tells their holders (a
// watch on the lock's record: driver.LossDeleted — or, with the flaw
// deletionCalledSession, LossSession).
func (s *flawedStore) deleteKey(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.locks[key]
	delete(s.locks, key)
	kind := driver.LossDeleted
	if s.flaw == deletionCalledSession {
		kind = driver.LossSession
	}
	for _, l := range ls {
		l.cause = &driver.LossError{Kind: kind, Err: errors.New("the lock was deleted")}
		close(l.lost)
	}
	return len(ls) > 0
}

type flawedDriver struct{ s *flawedStore }

func (d flawedDriver) Close() error { return nil }

func (d flawedDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	s := d.s
	if s.flaw == splitVotes && s.overlapped(key) {
		return nil, driver.Busy(0)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lk, err := s.tryLocked(key, ttl)
	if err != nil {
		return nil, err
	}
	return lk, nil
}

// tryLocked is TryLock; the caller holds s.mu.
func (s *flawedStore) tryLocked(key string, ttl time.Duration) (*flawedLock, error) {
	now := time.Now()
	live := s.locks[key][:0]
	for _, l := range s.locks[key] {
		if s.neverExpires(key) || now.Before(l.expires) {
			live = append(live, l)
		}
	}
	s.locks[key] = live
	if len(live) >= s.limit(key) {
		return nil, driver.Busy(0)
	}
	s.token++
	l := s.newLock(key, now.Add(ttl))
	if s.flaw == constantToken {
		l.token = 1
	}
	s.locks[key] = append(live, l)
	return l, nil
}

// overlapped registers a TryLock of key, lets 2ms pass (a vote's round trip) and
// reports whether another TryLock of key was in flight meanwhile: then every one of
// them fails, as contenders whose votes split do.
func (s *flawedStore) overlapped(key string) bool {
	s.mu.Lock()
	s.trying[key]++
	if s.trying[key] > 1 {
		s.split[key] = true
	}
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	split := s.split[key]
	if s.trying[key]--; s.trying[key] == 0 {
		delete(s.trying, key)
		delete(s.split, key)
	}
	return split
}

// waitingDriver waits for a lock itself (driver.Waiter) by polling TryLock. With the
// cancelLeavesGrant flaw a cancelled wait stays pending for 50ms, as a request the
// server still serves after its client gave up: a release meanwhile hands the lock to
// it, and it holds the lock for 20ms.
type waitingDriver struct{ flawedDriver }

func (d waitingDriver) Lock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	for {
		lk, err := d.TryLock(ctx, key, ttl)
		var busy *driver.BusyError
		if !errors.As(err, &busy) {
			return lk, err
		}
		select {
		case <-ctx.Done():
			if d.s.flaw == cancelLeavesGrant {
				d.s.mu.Lock()
				d.s.pending[key] = time.Now().Add(50 * time.Millisecond)
				d.s.mu.Unlock()
			}
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (l *flawedLock) Token() uint64 { return l.token }

// Lost and Cause implement driver.Sessioned: Lost closes when the lock is deleted
// (deleteKey).
func (l *flawedLock) Lost() <-chan struct{} { return l.lost }

func (l *flawedLock) Cause() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.cause
}

// find returns the index of l among key's live owners, or -1.
func (l *flawedLock) find() int {
	for i, o := range l.s.locks[l.key] {
		if o == l && (l.s.neverExpires(l.key) || time.Now().Before(o.expires)) {
			return i
		}
	}
	return -1
}

func (l *flawedLock) Refresh(ctx context.Context, ttl time.Duration) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	i := l.find()
	if i < 0 && l.s.flaw == releaseIgnoresOwner && len(l.s.locks[l.key]) > 0 {
		i = 0
	}
	if i < 0 {
		return dlock.ErrNotHeld
	}
	l.s.locks[l.key][i].expires = time.Now().Add(ttl)
	return nil
}

func (l *flawedLock) Unlock(ctx context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.flaw == releaseIgnoresOwner {
		delete(l.s.locks, l.key)
		return nil
	}
	if !l.unlockLocked() {
		return dlock.ErrNotHeld
	}
	if until, ok := l.s.pending[l.key]; ok {
		delete(l.s.pending, l.key)
		if now := time.Now(); now.Before(until) {
			l.s.token++
			l.s.locks[l.key] = append(l.s.locks[l.key], l.s.newLock(l.key, now.Add(20*time.Millisecond)))
		}
	}
	return nil
}

// unlockLocked removes l if it is still a live owner and reports whether it was;
// the caller holds s.mu.
func (l *flawedLock) unlockLocked() bool {
	i := l.find()
	if i < 0 {
		return false
	}
	l.s.locks[l.key] = append(l.s.locks[l.key][:i], l.s.locks[l.key][i+1:]...)
	return true
}

type flawedHarness struct {
	s    *flawedStore
	caps spec.Capabilities
	wait bool // the driver waits itself (driver.Waiter)
}

func (h flawedHarness) NewLocker(t testing.TB) dlock.Locker {
	info := driver.Info{Name: "flawed-" + string(h.s.flaw)}
	if h.wait {
		return dlock.New(waitingDriver{flawedDriver{h.s}}, info)
	}
	return dlock.New(flawedDriver{h.s}, info)
}

func (h flawedHarness) Capabilities() spec.Capabilities { return h.caps }

func (h flawedHarness) Name() string { return "flawed-" + string(h.s.flaw) }

// deletingHarness can delete a lock behind its holder's back, whose holder learns of
// it at once (declared spec.SeenByWatch).
type deletingHarness struct{ flawedHarness }

func (h deletingHarness) DeleteKey(t testing.TB, key string) {
	if !h.s.deleteKey(key) {
		t.Fatalf("DeleteKey(%q): no lock to delete", key)
	}
}

// TestFlawedSuite runs the suite on the flawed store named by DLOCK_FLAW (declaring
// the property DLOCK_DECLARE names as a weakness). It is run by TestSuiteCatchesFlaws.
func TestFlawedSuite(t *testing.T) {
	f, ok := os.LookupEnv("DLOCK_FLAW")
	if !ok {
		t.Skip("run by TestSuiteCatchesFlaws with DLOCK_FLAW set")
	}
	caps := spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true,
		Election: &spec.Primitive{Native: true, Fencing: true}, MultiKey: &spec.Primitive{Native: true, Fencing: true}}
	if p := spec.Property(os.Getenv("DLOCK_DECLARE")); p != "" {
		switch {
		case slices.Contains(spec.ElectionProperties, p):
			caps.Election.Weaknesses = []spec.Property{p}
		case slices.Contains(spec.MultiKeyProperties, p):
			caps.MultiKey.Weaknesses = []spec.Property{p}
		default:
			caps.Weaknesses = []spec.Property{p}
		}
	}
	if os.Getenv("DLOCK_QUEUE") == "1" { // FIFO needs a store with a queue
		caps.FIFO = true
		conformance.Run(t, queueHarness{memlock.NewStore(), flaw(f) == barging, new(atomic.Int64), caps})
		return
	}
	s := &flawedStore{flaw: flaw(f), locks: map[string][]*flawedLock{}, terms: map[string]*flawedTerms{},
		trying: map[string]int{}, split: map[string]bool{}, pending: map[string]time.Time{}}
	h := flawedHarness{s, caps, os.Getenv("DLOCK_WAITER") == "1"}
	if os.Getenv("DLOCK_DELETER") == "1" {
		h.caps.DeletionSeen = spec.SeenByWatch
		conformance.Run(t, deletingHarness{h})
		return
	}
	conformance.Run(t, h)
}

func TestSuiteCatchesFlaws(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child test processes")
	}
	for f, prop := range flaws {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			catches(t, "TestFlawedSuite", f, prop, func(fl flaw) []string {
				env := []string{"DLOCK_FLAW=" + string(fl)}
				switch prop {
				case spec.FIFO:
					env = append(env, "DLOCK_QUEUE=1")
				case spec.Cancellation:
					env = append(env, "DLOCK_WAITER=1")
				case spec.DoneAndErr:
					env = append(env, "DLOCK_DELETER=1")
				}
				return env
			})
		})
	}
}

// catches runs the property prop of the suite in test (a child test process) four
// ways, with the environment env gives for a flaw: without the flaw it must pass,
// with flaw f it must fail, with f declared a weakness it must pass with the
// violation reproduced, and declared on the sound store it must fail.
func catches(t *testing.T, test string, f flaw, prop spec.Property, env func(fl flaw) []string) {
	run := func(fl flaw, declare bool) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$/^"+string(prop)+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), env(fl)...)
		if declare {
			cmd.Env = append(cmd.Env, "DLOCK_DECLARE="+string(prop))
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	fail := "--- FAIL: " + test + "/" + string(prop)
	pass := "--- PASS: " + test + "/" + string(prop)

	out, err := run(noFlaw, false)
	if err != nil || !strings.Contains(out, pass) {
		t.Fatalf("control run without a flaw: want %s to pass, got err %v:\n%s", prop, err, out)
	}
	out, err = run(f, false)
	if err == nil || !strings.Contains(out, fail) {
		t.Fatalf("flaw %s: want %s to fail, got err %v:\n%s", f, prop, err, out)
	}
	out, err = run(f, true)
	if err != nil || !strings.Contains(out, pass) || !strings.Contains(out, "declared weakness reproduced") {
		t.Fatalf("flaw %s declared as a weakness: want %s to pass with the violation reproduced, got err %v:\n%s", f, prop, err, out)
	}
	out, err = run(noFlaw, true)
	if err == nil || !strings.Contains(out, "did not reproduce") {
		t.Fatalf("weakness %s declared on a sound store: want the suite to fail, got err %v:\n%s", prop, err, out)
	}
}

// TestCheckerCatchesFlawsInHistory: the checker, from the recorded history alone,
// finds what a flawed store does — two holders at once, a token handed out twice —
// whatever the property's own code looked for: its evidence (the overlap of two
// beliefs, the order of tokens) is in the failing property's output.
func TestCheckerCatchesFlawsInHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child test processes")
	}
	for _, c := range []struct {
		f    flaw
		prop spec.Property
		says string
	}{
		{twoHolders, spec.MutualExclusion, "still believed it held it"},
		{twoHolders, spec.TryAcquire, "still believed it held it"},
		{constantToken, spec.FencingMonotonic, "had completed"},
	} {
		t.Run(string(c.f)+"/"+string(c.prop), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFlawedSuite$/^"+string(c.prop)+"$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), "DLOCK_FLAW="+string(c.f))
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.says) {
				t.Fatalf("flaw %s: want %s to fail with the checker's evidence (%q), got err %v:\n%s", c.f, c.prop, c.says, err, out)
			}
		})
	}
}
