package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
	_ "unsafe" // for go:linkname

	"github.com/dlock-go/dlock"
)

// Every trial of every property and fault scenario records a history: what each
// client invoked and saw, what the protected resource accepted, and which faults were
// injected, on one clock. The checker (checker.go) decides the trial's verdict from
// the history alone; the code that drives a trial only acts and records.
//
// The clock is the machine's CLOCK_MONOTONIC, which every process on the machine
// shares: holders in child processes stamp their events with it too, so that a
// child's grant and the parent's fault injection are ordered as they happened.

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// mono returns the machine's monotonic clock in nanoseconds (CLOCK_MONOTONIC on Linux,
// the same in every process).
func mono() int64 { return nanotime() }

// Op names what an event is about.
type Op string

// The operations of a history.
const (
	OpAcquire Op = "acquire" // Acquire (or a primitive's wait: Campaign, AcquireAll, …)
	OpTry     Op = "try"     // TryAcquire (or its primitive's form)
	OpRelease Op = "release"
	OpRefresh Op = "refresh"
	OpEnd     Op = "end"    // the lease's Done closed (Err in Err)
	OpClose   Op = "close"  // Locker.Close
	OpEnter   Op = "enter"  // the protected resource: a holder enters (Token), OK or refused
	OpLeave   Op = "leave"  // the protected resource: a holder leaves
	OpFault   Op = "fault"  // a fault (Note names it): start (call) and end (ok)
	OpExpect  Op = "expect" // a check the property made of what an operation returned: ok or fail
	OpNote    Op = "note"   // anything worth seeing in the history
)

// Phase is where in its life an operation was when the event was recorded.
type Phase string

// The phases. A call is followed by an ok or a fail of the same operation and client
// (Seq pairs them); some events are points (a lease's end, a note).
const (
	Call Phase = "call"
	OK   Phase = "ok"
	Fail Phase = "fail"
)

// Event is one entry of a history.
type Event struct {
	T      int64  `json:"t"`             // CLOCK_MONOTONIC, ns
	Seq    int64  `json:"seq,omitempty"` // pairs a call with its completion
	Client string `json:"c,omitempty"`
	Op     Op     `json:"op"`
	Phase  Phase  `json:"ph,omitempty"`
	Key    string `json:"k,omitempty"`
	// Kind is what is held: "" (the mutex), "permit", "shared", "exclusive", "term"
	// (an election's leadership), "set" (AcquireAll: Keys).
	Kind  string   `json:"kind,omitempty"`
	Limit int      `json:"limit,omitempty"` // a semaphore's limit
	Keys  []string `json:"keys,omitempty"`  // a set's keys
	Lease int64    `json:"lease,omitempty"` // the grant an event is about (its ok's Seq)
	Token uint64   `json:"tok,omitempty"`
	Err   string   `json:"err,omitempty"`
	Note  string   `json:"note,omitempty"`
	// Resource names the protected resource of an OpEnter or OpLeave: "" the suite's
	// own, else the fencing guard (FenceGuard.Name) that decided. A guard's entry is
	// a call (Seq) and its completion: accepted (ok) or refused (fail, Err).
	Resource string `json:"res,omitempty"`
	// Cause, on an OpEnd, names why a lease that was lost ended (its
	// dlock.LossError's Cause: "expired", "unreachable", …), or is "unclassified"
	// for a loss (ErrLost, ErrExpired) without a LossError; empty for an end that is
	// no loss (released, closed).
	Cause string `json:"cause,omitempty"`
}

// maxEvents bounds one trial's history; past it events are counted, not kept.
const maxEvents = 50000

// history is one trial's record. Safe for concurrent use.
type history struct {
	mu      sync.Mutex
	start   int64 // mono() when the trial began
	events  []Event
	dropped int
	seq     int64
	leases  []*recLease // watched: their ends are recorded by goroutines
}

// settle waits until the end of every lease of the trial whose Done has closed is in
// the history (each is recorded by a goroutine of its own).
func (h *history) settle() {
	h.mu.Lock()
	leases := append([]*recLease(nil), h.leases...)
	h.mu.Unlock()
	for _, l := range leases {
		select {
		case <-l.Lease.Done():
			<-l.ended
		default:
		}
	}
}

func newHistory() *history { return &history{start: mono()} }

// add records e, stamping it now if it has no time.
func (h *history) add(e Event) Event {
	if e.T == 0 {
		e.T = mono()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) >= maxEvents {
		h.dropped++
		return e
	}
	h.events = append(h.events, e)
	return e
}

// next returns a fresh sequence number.
func (h *history) next() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq
}

// snapshot returns the events in time order.
func (h *history) snapshot() ([]Event, int) {
	h.mu.Lock()
	ev := append([]Event(nil), h.events...)
	dropped := h.dropped
	h.mu.Unlock()
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].T < ev[j].T })
	return ev, dropped
}

// writeJSONL writes the events, one JSON object a line, with times relative to the
// trial's start.
func writeJSONL(w io.Writer, start int64, events []Event) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range events {
		e.T -= start
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// call records the start of op by client and returns a function that records its
// completion (ok when err is nil, fail otherwise) and returns the completion event.
func (h *history) call(client string, op Op, e Event) func(err error, done Event) Event {
	e.Client, e.Op, e.Phase, e.Seq = client, op, Call, h.next()
	call := h.add(e)
	return func(err error, done Event) Event {
		done.Client, done.Op, done.Seq = client, op, call.Seq
		if done.Key == "" {
			done.Key, done.Kind, done.Limit, done.Keys = call.Key, call.Kind, call.Limit, call.Keys
		}
		if done.Note == "" {
			done.Note = call.Note
		}
		done.Phase = OK
		if err != nil {
			done.Phase, done.Err = Fail, err.Error()
		}
		return h.add(done)
	}
}

// recorder hands out recording clients and keeps the current trial's history.
type recorder struct {
	mu      sync.Mutex
	cur     *history
	clients int
	stop    chan struct{} // closed when the recorder's cell is done: lease watchers end
	stopped bool
}

func newRecorder() *recorder {
	return &recorder{cur: newHistory(), stop: make(chan struct{})}
}

// begin starts a new trial's history and returns it.
func (r *recorder) begin() *history {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur = newHistory()
	return r.cur
}

func (r *recorder) hist() *history {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// name returns a new client name with prefix.
func (r *recorder) name(prefix string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients++
	return fmt.Sprintf("%s%d", prefix, r.clients)
}

// close ends the watchers of leases that are still live.
func (r *recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.stopped = true
		close(r.stop)
	}
}

// fault records a fault named what around inject: its start before, its end after.
func (r *recorder) fault(what string, inject func()) {
	done := r.hist().call("", OpFault, Event{Note: what})
	inject()
	done(nil, Event{})
}

// note records a note.
func (r *recorder) note(format string, args ...any) {
	r.hist().add(Event{Op: OpNote, Note: fmt.Sprintf(format, args...)})
}

// expect records a check a property made: ok, or fail with the reason.
func (r *recorder) expect(ok bool, format string, args ...any) {
	e := Event{Op: OpExpect, Phase: OK}
	if !ok {
		e.Phase, e.Note = Fail, fmt.Sprintf(format, args...)
	}
	r.hist().add(e)
}

// locker wraps l so that every call is recorded as client name.
func (r *recorder) locker(l dlock.Locker, name string) dlock.Locker {
	return &recLocker{Locker: l, r: r, name: name}
}

// recLocker records the calls of one client. Primitives made from it (NewSemaphore,
// …) find the Locker underneath (Unwrap) and are recorded by their handle's wrapper
// (recHandle) instead.
type recLocker struct {
	dlock.Locker
	r    *recorder
	name string
}

func (l *recLocker) Unwrap() dlock.Locker { return l.Locker }

func (l *recLocker) Acquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.r.grant(l.name, OpAcquire, Event{Key: key}, func() (dlock.Lease, error) { return l.Locker.Acquire(ctx, key, opts...) })
}

func (l *recLocker) TryAcquire(ctx context.Context, key string, opts ...dlock.Option) (dlock.Lease, error) {
	return l.r.grant(l.name, OpTry, Event{Key: key}, func() (dlock.Lease, error) { return l.Locker.TryAcquire(ctx, key, opts...) })
}

func (l *recLocker) Close() error {
	done := l.r.hist().call(l.name, OpClose, Event{})
	err := l.Locker.Close()
	done(err, Event{})
	return err
}

// grant records one acquisition: its call, its completion (with the token) and, for
// a grant, the lease's later life.
func (r *recorder) grant(client string, op Op, what Event, acquire func() (dlock.Lease, error)) (dlock.Lease, error) {
	h := r.hist()
	done := h.call(client, op, what)
	ls, err := acquire()
	if err != nil {
		done(err, Event{})
		return nil, err
	}
	ok := done(nil, Event{Token: ls.Token()})
	return r.watch(h, client, ok, ls), nil
}

// watch wraps a granted lease: its Release and Refresh are recorded, and so is the
// moment its Done closes.
func (r *recorder) watch(h *history, client string, grant Event, ls dlock.Lease) dlock.Lease {
	rl := &recLease{Lease: ls, h: h, client: client, grant: grant, ended: make(chan struct{})}
	h.mu.Lock()
	h.leases = append(h.leases, rl)
	h.mu.Unlock()
	go func() {
		defer close(rl.ended)
		select {
		case <-ls.Done():
			e := Event{T: endedAt(ls), Client: client, Op: OpEnd, Key: grant.Key, Kind: grant.Kind, Keys: grant.Keys, Lease: grant.Seq}
			if err := ls.Err(); err != nil {
				e.Err, e.Cause = err.Error(), causeName(err)
			}
			h.add(e)
		case <-r.stop:
		}
	}()
	return rl
}

// causeName names the cause of a lease's end err for Event.Cause: its LossError's
// Cause, "unclassified" for a loss without one, "" for an end that is no loss.
func causeName(err error) string {
	var le *dlock.LossError
	switch {
	case errors.As(err, &le):
		return le.Cause.String()
	case errors.Is(err, dlock.ErrLost) || errors.Is(err, dlock.ErrExpired):
		return "unclassified"
	}
	return ""
}

// endedAt is when ls ended on the monotonic clock: the lease's own record where it
// keeps one (dlock's leases do: the moment Done closed, or its deadline), else now —
// a moment later than the end, by the time this goroutine took to see it.
func endedAt(ls dlock.Lease) int64 {
	now := mono()
	if e, ok := ls.(interface{ EndedAt() time.Time }); ok {
		if at := e.EndedAt(); !at.IsZero() {
			return now - int64(time.Since(at))
		}
	}
	return now
}

// recLease records the calls on one lease.
type recLease struct {
	dlock.Lease
	h      *history
	client string
	grant  Event
	ended  chan struct{} // closed once the lease's end is recorded (or the recorder stopped)
}

// Unwrap returns the lease underneath (a *dlock.SetLease for AcquireAll).
func (l *recLease) Unwrap() dlock.Lease { return l.Lease }

func (l *recLease) Release(ctx context.Context) error {
	done := l.h.call(l.client, OpRelease, Event{Key: l.grant.Key, Kind: l.grant.Kind, Keys: l.grant.Keys, Lease: l.grant.Seq})
	err := l.Lease.Release(ctx)
	done(err, Event{Lease: l.grant.Seq})
	return err
}

func (l *recLease) Refresh(ctx context.Context, ttl time.Duration) error {
	done := l.h.call(l.client, OpRefresh, Event{Key: l.grant.Key, Kind: l.grant.Kind, Keys: l.grant.Keys, Lease: l.grant.Seq})
	err := l.Lease.Refresh(ctx, ttl)
	done(err, Event{Lease: l.grant.Seq})
	return err
}

// unwrapLease returns the lease a recording wrapper holds (or ls itself).
func unwrapLease(ls dlock.Lease) dlock.Lease {
	if rl, ok := ls.(*recLease); ok {
		return rl.Lease
	}
	return ls
}

// recHandle records a primitive's handle (a semaphore, a read-write lock's side, a
// candidate): Acquire and TryAcquire with the key and kind it takes.
type recHandle struct {
	h      handle
	r      *recorder
	client string
	what   Event // Key, Kind, Limit
}

func (r *recorder) handle(h handle, client string, what Event) handle {
	return &recHandle{h: h, r: r, client: client, what: what}
}

func (h *recHandle) Acquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.r.grant(h.client, OpAcquire, h.what, func() (dlock.Lease, error) { return h.h.Acquire(ctx, opts...) })
}

func (h *recHandle) TryAcquire(ctx context.Context, opts ...dlock.Option) (dlock.Lease, error) {
	return h.r.grant(h.client, OpTry, h.what, func() (dlock.Lease, error) { return h.h.TryAcquire(ctx, opts...) })
}

// recorded returns h recorded as l's client when l is a recording client (its
// primitives reach the Locker underneath, so their handles record for it), else h.
func recorded(l dlock.Locker, h handle, what Event) handle {
	if rl, ok := l.(*recLocker); ok {
		return rl.r.handle(h, rl.name, what)
	}
	return h
}

// harnessClient returns the client the harness made under a recording wrapper: the
// harness's own methods (Vanish) know its clients by what NewLocker returned.
func harnessClient(l dlock.Locker) dlock.Locker {
	if rl, ok := l.(*recLocker); ok {
		return rl.Locker
	}
	return l
}
