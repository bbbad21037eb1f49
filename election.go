package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"
)

var (
	// ErrNoLeader: the election has no leader (Election.Leader).
	ErrNoLeader = errors.New("dlock: no leader")
	// ErrInvalidValue: a campaign's value is longer than MaxValueLen bytes.
	ErrInvalidValue = errors.New("dlock: invalid value")
	// ErrInvalidName: an election's name is not 1 to MaxKeyLen bytes of valid UTF-8
	// (NewElection). Names follow the rule of keys (ValidateKey), but an election is
	// not a lock: the error is not ErrInvalidKey.
	ErrInvalidName = errors.New("dlock: invalid election name")
)

// MaxValueLen is the longest value, in bytes, a candidate campaigns with.
const MaxValueLen = 4096

// Election is one named leader election on a backend: at most one leader at a
// time, each term with a fencing token larger than the term's before it. Safe for
// concurrent use. Candidates in other processes campaign in the same election with
// an Election of the same name on the same backend (URL, prefix, root, table).
//
// An election's name is its own namespace: the election "x" and the lock "x" (or a
// semaphore "x") never share a key in the store.
type Election struct {
	l    *locker
	obs  Observer
	name string
	el   driver.Elector
}

// Leader is one term of an election.
type Leader struct {
	Name  string // the election's name
	Value string // what the leader campaigned with
	// Token is the term's fencing token: larger than every earlier term's of this
	// election. A resource that checks it refuses a deposed leader that still acts.
	Token uint64
}

// NewElection returns the election name on the backend of l (any Locker made by New,
// or one that unwraps to it: see Unwrapper). It returns an error wrapping
// ErrInvalidName for a name that is not 1 to MaxKeyLen bytes of valid UTF-8 (the rule
// of keys), and one wrapping errors.ErrUnsupported for a backend without elections
// (driver.Elector).
func NewElection(l Locker, name string) (*Election, error) {
	if err := ValidateKey(name); err != nil {
		return nil, fmt.Errorf("%w%s", ErrInvalidName, strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()))
	}
	c, obs, ok := core(l)
	if !ok {
		return nil, fmt.Errorf("dlock: elections need a Locker made by dlock.New (%T does not unwrap to one): %w", l, errors.ErrUnsupported)
	}
	el, ok := c.d.(driver.Elector)
	if !ok {
		return nil, fmt.Errorf("dlock: %s has no leader election: %w", c.info.Name, errors.ErrUnsupported)
	}
	return &Election{l: c, obs: obs, name: name, el: el}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this caller is the leader with value, ctx is done, or the
// backend fails. The Lease it returns is the term: its Token is the term's fencing
// token, its Done closes when the leadership ends (resigned, lost, expired: a
// leader that cannot renew steps down at its validity deadline, before the store
// lets another candidate win), and Release resigns. It takes the options of
// Locker.Acquire (TTL, retry, auto-renewal — which a leader usually wants —,
// observer).
//
// Where the store queues candidates (etcd, ZooKeeper) Campaign waits in that
// queue, served in order; elsewhere it retries by the retry strategy, woken when
// the term ends where the backend announces it (Redis, mem).
//
// Errors: as for Locker.Acquire, and ErrInvalidValue for a value longer than
// MaxValueLen bytes.
func (e *Election) Campaign(ctx context.Context, value string, opts ...Option) (Lease, error) {
	return e.campaign(ctx, value, true, opts)
}

// TryCampaign makes one attempt to become the leader: ErrNotAcquired when another
// candidate leads (or, where candidates queue, waits ahead). Otherwise as Campaign.
func (e *Election) TryCampaign(ctx context.Context, value string, opts ...Option) (Lease, error) {
	return e.campaign(ctx, value, false, opts)
}

func (e *Election) campaign(ctx context.Context, value string, wait bool, opts []Option) (Lease, error) {
	if len(value) > MaxValueLen {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidValue, len(value), MaxValueLen)
	}
	r := request{key: e.name,
		try: func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return e.el.TryCampaign(ctx, e.name, value, ttl)
		}}
	if w, ok := e.el.(driver.CampaignWaiter); ok {
		r.wait = func(ctx context.Context, ttl time.Duration) (driver.Lock, error) {
			return w.Campaign(ctx, e.name, value, ttl)
		}
	}
	if n, ok := e.el.(driver.CampaignNotifier); ok {
		r.wake = n.CampaignWake(e.name)
	}
	if e.obs != nil {
		opts = append([]Option{WithObserver(e.obs)}, opts...)
	}
	return e.l.acquire(ctx, r, wait, opts)
}

// Leader returns the current leader as the store sees it, or an error wrapping
// ErrNoLeader when there is none. The answer may be stale by the time it arrives
// (the leader may just have stepped down): act on a term only with its token.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if !e.l.enter() {
		return Leader{}, ErrClosed
	}
	d, err := e.el.Leader(ctx, e.name)
	e.l.leave()
	switch {
	case errors.Is(err, ErrNoLeader):
		return Leader{}, fmt.Errorf("%w of %q (%s)", ErrNoLeader, e.name, e.l.info.Name)
	case err != nil:
		return Leader{}, fmt.Errorf("dlock: %s: leader of %q: %w", e.l.info.Name, e.name, err)
	}
	return Leader{Name: e.name, Value: d.Value, Token: d.Token}, nil
}

// observeRetry is how long Observe waits before it asks the store again after a
// failure (attempt counted from 1).
var observeRetry = ExponentialBackoff(20*time.Millisecond, time.Second)

// Observe streams the leaders of the election: the current one (if any), then each
// new leader as it is elected, in term order (tokens strictly increase, no term
// twice), until ctx ends or the Locker is closed; then the channel is closed. A
// store that fails is asked again after a pause. Periods without a leader are not
// reported.
//
// Not guaranteed everywhere: a term that begins and ends while the observer is
// not looking (between two reads of a store that keeps no history of terms, or
// while the store is unreachable) may be missed; which backends keep every term
// is in docs/election.md. A receiver that does not keep up slows the observer down,
// it does not lose terms.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if !e.l.enter() { // closed: nothing to observe
		close(ch)
		return ch
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.l.closeCtx, cancel)
	go func() {
		defer close(ch)
		defer e.l.leave() // Close waits until the watch has let go of the store
		defer cancel()
		defer stop()
		var last uint64
		for failures := 1; ctx.Err() == nil; failures++ {
			_ = e.el.WatchLeaders(ctx, e.name, last, func(d driver.Leader) {
				if d.Token <= last {
					return
				}
				select {
				case ch <- Leader{Name: e.name, Value: d.Value, Token: d.Token}:
					last = d.Token
					failures = 1
				case <-ctx.Done():
				}
			})
			t := time.NewTimer(observeRetry.Backoff(failures))
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}()
	return ch
}
