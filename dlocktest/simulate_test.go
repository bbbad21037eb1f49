package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock"
)

// simOptions tunes what simulate does beyond what the seed decides.
type simOptions struct {
	// clean: no fault at all (no director, no fault on the store's calls): the
	// workload alone, for a baseline.
	clean bool
}

// simClient is one client of a schedule and what its workers share.
type simClient struct {
	c       *Client
	rate    float64
	workers int
	closed  time.Time // when the director's Close of it began (zero: not closed)
}

// held is one lease a worker of the schedule was granted.
type held struct {
	client *simClient
	worker int
	ls     dlock.Lease
	kind   string   // mutex, set, permit, shared, exclusive, leader
	locks  []string // the locks it holds, by name: a mutex's and a set's keys share names
	limit  int      // a permit's semaphore's limit
	auto   bool     // auto-renewed
	at     time.Time
	// believed: the worker counts on it (from the grant until its Release begins).
	believed bool
	released bool        // a Release returned nil
	lose     dlock.Cause // a Lose of it returned nil with this cause
	loseAt   time.Time
}

func (h *held) String() string {
	return fmt.Sprintf("%s's %s %q (token %d)", h.client.c.name, h.kind, h.ls.Key(), h.ls.Token())
}

// open reports whether h's lease is still valid as its client sees it (Done not
// closed), checking that Err agrees with Done.
func (sim *simulation) open(h *held) bool {
	select {
	case <-h.ls.Done():
		if h.ls.Err() == nil {
			sim.violate("%v: Done is closed and Err is nil", h)
		}
		return false
	default:
		return true
	}
}

// simulation is one schedule under way.
type simulation struct {
	seed  uint64
	o     simOptions
	s     *Store
	start time.Time

	// faultRate is the share of the store's calls that meet a fault of their own.
	faultRate float64
	clients   []*simClient

	mu         sync.Mutex
	leases     []*held
	log        []string
	violations []string
	calls      map[string]uint64 // per client and call: how many came before
	ncalls     int
}

func (sim *simulation) logf(format string, args ...any) {
	line := fmt.Sprintf("%10v ", time.Since(sim.start)) + fmt.Sprintf(format, args...)
	sim.mu.Lock()
	sim.log = append(sim.log, line)
	sim.mu.Unlock()
}

func (sim *simulation) violate(format string, args ...any) {
	v := fmt.Sprintf("at %v: ", time.Since(sim.start)) + fmt.Sprintf(format, args...)
	sim.mu.Lock()
	sim.violations = append(sim.violations, v)
	sim.mu.Unlock()
}

// rng returns a generator for one actor of the schedule: the same on every run.
func rngOf(seed uint64, actor string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(actor))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// fateOf is the fault the n-th call of its kind by a client meets: drawn from
// the seed, the client, the call and n alone.
func (sim *simulation) fateOf(c *Client, call, key string, token uint64) fate {
	id := c.name + " " + call
	sim.mu.Lock()
	n := sim.calls[id]
	sim.calls[id]++
	sim.ncalls++
	sim.mu.Unlock()
	if sim.faultRate == 0 {
		return fate{}
	}
	r := rngOf(sim.seed^n*0x9e3779b97f4a7c15, id)
	if r.Float64() >= sim.faultRate {
		return fate{}
	}
	switch r.IntN(4) {
	case 0:
		return fate{fail: true, note: "schedule: fail"}
	case 1:
		return fate{hang: true, note: "schedule: hang"}
	case 2:
		return fate{loseReply: true, note: "schedule: reply lost"}
	default:
		d := between(r, time.Millisecond, 1500*time.Millisecond)
		return fate{delay: d, note: fmt.Sprintf("schedule: reply %v late", d)}
	}
}

// simulate runs seed's schedule; it must run in a synctest bubble of its own.
func simulate(seed uint64, o simOptions) *simResult {
	r := rngOf(seed, "scenario")
	sim := &simulation{seed: seed, o: o, s: NewStore(), start: time.Now(), calls: map[string]uint64{}}
	var sched strings.Builder
	if !o.clean {
		sim.faultRate = []float64{0, 0.02, 0.08, 0.2}[r.IntN(4)]
		sim.s.schedule = sim.fateOf
	}
	fmt.Fprintf(&sched, "  seed %d: each store call meets a fault of its own with probability %v\n", seed, sim.faultRate)
	n := 2 + r.IntN(3)
	ops := 2 + r.IntN(6)
	for i := range n {
		// A clock drift the lease core's allowance covers (1% + 2ms).
		sc := &simClient{c: sim.s.Client(fmt.Sprintf("c%d", i)), rate: 0.995 + 0.025*r.Float64(), workers: 1 + r.IntN(2)}
		sc.c.Drift(sc.rate)
		sim.clients = append(sim.clients, sc)
		fmt.Fprintf(&sched, "  client %s: clock rate %.4f, %d workers of %d operations\n", sc.c.name, sc.rate, sc.workers, ops)
	}

	var wg sync.WaitGroup
	for _, sc := range sim.clients {
		for w := range sc.workers {
			wg.Go(func() { sim.work(sc, w, ops) })
		}
	}
	stop := make(chan struct{})
	var dir sync.WaitGroup
	if !o.clean {
		dir.Go(func() { sim.direct(stop) })
	}
	wg.Wait()
	close(stop)
	dir.Wait()

	t0 := time.Now()
	if err := sim.s.Close(); err != nil {
		sim.violate("Store.Close: %v", err)
	}
	if d := time.Since(t0); d > closeBound {
		sim.violate("Store.Close took %v", d)
	}
	synctest.Wait()
	sim.final()
	return &simResult{seed: seed, schedule: sched.String(), violations: sim.violations,
		history: sim.s.History(), log: sim.log, calls: sim.ncalls}
}

// closeBound is how long a client's Close may take: the lease core's drain
// (closeDrain) and its releases' bound (a second).
const closeBound = closeDrain + time.Second

// simCtx is a call's context and the moment it ends (a deadline, or a cancel at
// a moment drawn from the seed).
type simCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	bound  time.Time
	stop   func() bool
}

func (sim *simulation) ctxFor(r *rand.Rand) simCtx {
	d := between(r, 100*time.Millisecond, 6*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	sc := simCtx{ctx: ctx, cancel: cancel, bound: time.Now().Add(d), stop: func() bool { return false }}
	if r.IntN(4) == 0 { // cancelled at any moment
		c := between(r, 0, d)
		t := time.AfterFunc(c, cancel)
		sc.stop = t.Stop
		sc.bound = time.Now().Add(c)
	}
	return sc
}

func (c simCtx) done() { c.stop(); c.cancel() }

// returned checks that a call that began with c returned within c's bound plus
// slack.
func (sim *simulation) returned(who, what string, c simCtx, slack time.Duration) {
	if late := time.Since(c.bound); late > slack {
		sim.violate("%s: %s returned %v after its context ended", who, what, late)
	}
}

// acquirers are the kinds of acquisition a worker picks from.
var kinds = []string{"mutex", "mutex", "set", "permit", "shared", "exclusive", "leader"}

// work is one worker of a client: ops acquisitions, each held a while (checking
// exclusion as it goes), refreshed, released.
func (sim *simulation) work(sc *simClient, w, ops int) {
	c := sc.c
	who := fmt.Sprintf("%s/%d", c.name, w)
	r := rngOf(sim.seed, who)
	sem, _ := dlock.NewSemaphore(c, "sem", 2)
	rw, _ := dlock.NewRWMutex(c, "rw")
	el, _ := dlock.NewElection(c, "el")
	for range ops {
		time.Sleep(between(r, 0, time.Second))
		kind := kinds[r.IntN(len(kinds))]
		ttl := []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}[r.IntN(3)]
		opts := []dlock.Option{dlock.WithTTL(ttl)}
		auto := r.IntN(2) == 0
		if auto {
			opts = append(opts, dlock.WithAutoRenew())
		}
		retry := "queue"
		switch r.IntN(4) {
		case 1:
			opts, retry = append(opts, dlock.WithRetry(dlock.ConstantBackoff(50*time.Millisecond))), "constant 50ms"
		case 2:
			opts, retry = append(opts, dlock.WithRetry(dlock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond))), "exponential"
		case 3:
			opts, retry = append(opts, dlock.WithRetry(dlock.LimitRetry(dlock.ConstantBackoff(100*time.Millisecond), 3))), "3 retries"
		}
		try := r.IntN(3) == 0
		locks := []string{"a"}
		var key string
		cx := sim.ctxFor(r)
		var ls dlock.Lease
		var err error
		switch kind {
		case "mutex":
			key = []string{"a", "b"}[r.IntN(2)]
			locks = []string{key}
			if try {
				ls, err = c.TryAcquire(cx.ctx, key, opts...)
			} else {
				ls, err = c.Acquire(cx.ctx, key, opts...)
			}
		case "set":
			locks = [][]string{{"a", "b"}, {"b", "c"}, {"a", "c"}}[r.IntN(3)]
			key = dlock.SetKey(locks)
			if try {
				ls, err = dlock.TryAcquireAll(cx.ctx, c, locks, opts...)
			} else {
				ls, err = dlock.AcquireAll(cx.ctx, c, locks, opts...)
			}
		case "permit":
			locks, key = []string{"sem"}, "sem"
			if try {
				ls, err = sem.TryAcquire(cx.ctx, opts...)
			} else {
				ls, err = sem.Acquire(cx.ctx, opts...)
			}
		case "shared":
			locks, key = []string{"rw"}, "rw"
			if try {
				ls, err = rw.TryAcquireShared(cx.ctx, opts...)
			} else {
				ls, err = rw.AcquireShared(cx.ctx, opts...)
			}
		case "exclusive":
			locks, key = []string{"rw"}, "rw"
			if try {
				ls, err = rw.TryAcquire(cx.ctx, opts...)
			} else {
				ls, err = rw.Acquire(cx.ctx, opts...)
			}
		case "leader":
			locks, key = []string{"el"}, "el"
			if try {
				ls, err = el.TryCampaign(cx.ctx, who, opts...)
			} else {
				ls, err = el.Campaign(cx.ctx, who, opts...)
			}
		}
		what := fmt.Sprintf("%s %s %q (ttl %v, auto-renew %v, %s, try %v)", kind, "acquire", key, ttl, auto, retry, try)
		// A grant that arrives as the context ends is given back within a second
		// (the lease core's closeTimeout).
		sim.returned(who, what, cx, time.Second)
		cx.done()
		if err != nil {
			sim.logf("%s: %s: %v", who, what, err)
			if errors.Is(err, dlock.ErrClosed) {
				return
			}
			continue
		}
		if ls == nil {
			sim.violate("%s: %s returned no lease and no error", who, what)
			continue
		}
		h := &held{client: sc, worker: w, ls: ls, kind: kind, locks: locks, limit: 2, auto: auto, at: time.Now(), believed: true}
		sim.mu.Lock()
		sim.leases = append(sim.leases, h)
		sim.mu.Unlock()
		sim.logf("%s: %s: token %d", who, what, ls.Token())
		sim.hold(h, r, ttl, who)
		sim.release(h, r, who)
	}
}

// hold runs h's critical section: a few steps, each checking that h is valid
// and that no other lease the workload counts on conflicts with it; the
// non-renewed ones refreshed now and then, some held past their TTL.
func (sim *simulation) hold(h *held, r *rand.Rand, ttl time.Duration, who string) {
	steps := 1 + r.IntN(5)
	for range steps {
		time.Sleep(between(r, 0, ttl/2))
		if !sim.open(h) {
			sim.logf("%s: %v ended: %v", who, h, h.ls.Err())
			return // the worker honours Done
		}
		sim.exclusive(h)
		if !h.auto && r.IntN(3) == 0 {
			cx := sim.ctxFor(r)
			err := h.ls.Refresh(cx.ctx, ttl)
			sim.returned(who, "Refresh", cx, 0)
			cx.done()
			sim.logf("%s: refresh %v: %v", who, h, err)
			if errors.Is(err, dlock.ErrNotHeld) && sim.open(h) {
				sim.violate("%s: Refresh of %v returned ErrNotHeld and its Done is open: %v", who, h, err)
			}
		}
	}
}

// release gives h up, trying again after an error that does not say the lease
// ended; now and then a worker leaves a lease to its TTL instead.
func (sim *simulation) release(h *held, r *rand.Rand, who string) {
	if !h.auto && r.IntN(8) == 0 {
		sim.logf("%s: leaves %v to its TTL", who, h)
		return // still counted on: it is valid until its deadline
	}
	sim.mu.Lock()
	h.believed = false
	sim.mu.Unlock()
	for try := range 3 {
		cx := sim.ctxFor(r)
		err := h.ls.Release(cx.ctx)
		sim.returned(who, "Release", cx, 0)
		cx.done()
		sim.logf("%s: release %v (try %d): %v", who, h, try+1, err)
		switch {
		case err == nil:
			sim.mu.Lock()
			h.released = true
			sim.mu.Unlock()
			if sim.open(h) {
				sim.violate("%s: Release of %v returned nil and its Done is open", who, h)
			} else if !errors.Is(h.ls.Err(), dlock.ErrReleased) {
				sim.violate("%s: Release of %v returned nil and its Err is %v, not ErrReleased", who, h, h.ls.Err())
			}
			return
		case errors.Is(err, dlock.ErrNotHeld):
			if sim.open(h) {
				sim.violate("%s: Release of %v returned ErrNotHeld and its Done is open: %v", who, h, err)
			}
			return
		case errors.Is(err, dlock.ErrClosed):
			return
		}
	}
}

// conflict reports whether a and b may not both be valid: they share a lock
// and are not both shared leases (permits are counted apart).
func conflict(a, b *held) bool {
	for _, x := range a.locks {
		for _, y := range b.locks {
			if x == y && !(a.kind == "shared" && b.kind == "shared") {
				return true
			}
		}
	}
	return false
}

// exclusive checks, as h's holder is about to act on what h protects, that no
// other lease the workload counts on, valid in its own client's view, conflicts
// with h, and that a semaphore has no more valid permits than its limit.
func (sim *simulation) exclusive(h *held) {
	sim.mu.Lock()
	others := make([]*held, 0, len(sim.leases))
	for _, o := range sim.leases {
		if o != h && o.believed {
			others = append(others, o)
		}
	}
	sim.mu.Unlock()
	permits := 1
	for _, o := range others {
		if o.kind == "permit" && h.kind == "permit" {
			if sim.open(o) {
				permits++
			}
			continue
		}
		if (o.kind == "permit") != (h.kind == "permit") || !conflict(h, o) {
			continue
		}
		if sim.open(o) {
			sim.violate("exclusion: %v and %v are both valid in their clients' view (granted at %v and %v)",
				h, o, h.at.Sub(sim.start), o.at.Sub(sim.start))
		}
	}
	if permits > h.limit {
		sim.violate("exclusion: %d permits of semaphore %q valid at once, the limit is %d", permits, h.ls.Key(), h.limit)
	}
}

// direct injects the Store's faults at moments drawn from the seed until stop.
func (sim *simulation) direct(stop chan struct{}) {
	r := rngOf(sim.seed, "director")
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-stop:
			return false
		}
	}
	for pause(between(r, 100*time.Millisecond, 3*time.Second)) {
		sc := sim.clients[r.IntN(len(sim.clients))]
		c := sc.c
		switch r.IntN(10) {
		case 0:
			d := between(r, 10*time.Millisecond, 4*time.Second)
			sim.logf("director: the store hangs for %v", d)
			sim.s.Hang()
			pause(d)
			sim.s.Resume()
		case 1:
			d := between(r, 10*time.Millisecond, 4*time.Second)
			sim.logf("director: %s partitioned for %v", c.name, d)
			c.Partition()
			pause(d)
			c.Heal()
		case 2:
			n := 1 + r.IntN(5)
			sim.logf("director: %s's next %d refreshes fail", c.name, n)
			c.FailRefreshes(n)
		case 3:
			n := 1 + r.IntN(3)
			sim.logf("director: %s's next %d replies lost", c.name, n)
			c.LoseReplies(n)
		case 4:
			d := between(r, time.Millisecond, time.Second)
			sim.logf("director: %s's grants %v late", c.name, d)
			c.DelayGrants(d)
			pause(between(r, 0, 3*time.Second))
			c.DelayGrants(0)
		case 5:
			rate := 0.995 + 0.025*r.Float64()
			sim.logf("director: %s's clock rate %.4f", c.name, rate)
			c.Drift(rate)
		case 6, 7, 8:
			sim.lose(r)
		case 9:
			if r.IntN(3) != 0 || !sc.closed.IsZero() {
				continue
			}
			sim.closeClient(sc)
		}
	}
}

// lose makes the store lose one valid lease with a cause that reports it.
func (sim *simulation) lose(r *rand.Rand) {
	sim.mu.Lock()
	var valid []*held
	for _, h := range sim.leases {
		select {
		case <-h.ls.Done():
		default:
			valid = append(valid, h)
		}
	}
	sim.mu.Unlock()
	if len(valid) == 0 {
		return
	}
	h := valid[r.IntN(len(valid))]
	cause := []dlock.Cause{dlock.CauseDeleted, dlock.CauseSession, dlock.CauseExpired, dlock.CauseUnreachable}[r.IntN(4)]
	at := time.Now()
	err := sim.s.Lose(h.ls, cause)
	sim.logf("director: Lose %v (%v): %v", h, cause, err)
	switch {
	case err == nil:
		sim.mu.Lock()
		h.lose, h.loseAt = cause, at
		sim.mu.Unlock()
	case strings.Contains(err.Error(), "did not end"):
		sim.violate("%v", err)
	}
}

// closeClient closes one client at a moment of the schedule, and checks that
// Close returned within its bound with every lease of the client ended.
func (sim *simulation) closeClient(sc *simClient) {
	sim.mu.Lock()
	sc.closed = time.Now()
	sim.mu.Unlock()
	sim.logf("director: Close %s", sc.c.name)
	err := sc.c.Close()
	if d := time.Since(sc.closed); d > closeBound {
		sim.violate("%s's Close took %v", sc.c.name, d)
	}
	sim.logf("director: Close %s: %v", sc.c.name, err)
	sim.mu.Lock()
	ls := append([]*held(nil), sim.leases...)
	sim.mu.Unlock()
	for _, h := range ls {
		if h.client == sc && sim.open(h) {
			sim.violate("%v is valid after its client's Close returned", h)
		}
	}
}
