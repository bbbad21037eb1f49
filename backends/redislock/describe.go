package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/generic"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Inspection (dlock.Describe, dlock.List). One script (describe.lua) reads every key
// of a name at once — the lock and its fencing counter, the queue of waiters, the
// semaphore's or read-write lock's holders and settings, the election's term — all
// in the name's hash slot, so one round trip gives one consistent view, on a Cluster
// too. What the store keeps: the holder's owner value (and the Holder record written
// into it), its time left, the last fencing token of the key (the holder's, when the
// holder took the lock through dlock), the waiters of Acquire in order with their
// arrival by the server's clock and their place's time left; a permit's owner and
// time left (no token of its own: one counter counts the key's grants); an
// election's leader, value, term and time left. Callers that wait with a retry
// strategy (WithRetry) poll: the store knows nothing of them. List walks the fencing counters (one per lock name
// ever taken), the primitives' settings and the elections' terms with SCAN.

var describeScript = script("describe.lua")

var _ driver.Describer = (*redisDriver)(nil)

// describeKeys are the keys describe.lua reads for name, in its order.
func describeKeys(name string) []string {
	return append(append(fairKeys(name, "")[:4:4], primitiveKeys(name)...), electionKey(name), electionTermKey(name))
}

func (d *redisDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	res, err := describeScript.Run(ctx, d.c, describeKeys(key)).Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 14 {
		return nil, fmt.Errorf("describe script returned %d values, want 14", len(res))
	}
	r := reply(res)
	now := r.int(0)
	var out []driver.KeyState

	lock := driver.KeyState{Key: key, Kind: driver.KindLock, Queue: d.cfg.fifo}
	switch value := r.str(2); {
	case value != "":
		e := ownerEntry(value, time.Duration(r.int(3))*time.Millisecond)
		if !redisops.IsOwnerValue(value) {
			lock.Note = "held by a client that is not dlock's (no fencing token)"
		} else if tok, err := strconv.ParseUint(r.str(4), 10, 64); err == nil {
			e.Token = tok
		}
		if r.int(3) == -1 {
			lock.Note = strings.TrimPrefix(lock.Note+"; the key has no expiry", "; ")
		}
		lock.Holders = []driver.Entry{e}
	case r.str(1) != "none":
		lock.Note = "the key holds a Redis " + r.str(1) + ", not a lock"
	}
	deadlines := map[string]int64{}
	for _, p := range r.pairs(6) {
		deadlines[p.member] = p.score
	}
	for _, p := range r.pairs(5) {
		if dl, ok := deadlines[p.member]; ok && dl <= now {
			continue // gone: the next script drops it
		}
		w := ownerEntry(p.member, time.Duration(deadlines[p.member]-now)*time.Millisecond)
		w.Since = time.UnixMicro(p.score)
		lock.Waiters = append(lock.Waiters, w)
		lock.Queue = true
	}
	if len(lock.Holders)+len(lock.Waiters) > 0 || lock.Note != "" {
		out = append(out, lock)
	}

	if holders := r.pairs(7); len(holders) > 0 {
		ps := driver.KeyState{Key: key, Kind: driver.KindSemaphore}
		if r.str(8) == kindRWLock {
			ps.Kind = driver.KindRWLock
		} else {
			ps.Limit, _ = strconv.Atoi(r.str(9))
		}
		for _, p := range holders {
			e := ownerEntry(p.member, time.Duration(p.score-now)*time.Millisecond)
			e.Shared = ps.Kind == driver.KindRWLock && p.member != r.str(10)
			ps.Holders = append(ps.Holders, e)
		}
		out = append(out, ps)
	}

	if term := r.str(11); len(term) >= ownerLen {
		leader := driver.Entry{Owner: term[:ownerLen], Value: term[ownerLen:], TTL: ttlOf(r.int(12))}
		leader.Token, _ = strconv.ParseUint(r.str(13), 10, 64)
		out = append(out, driver.KeyState{Key: key, Kind: driver.KindElection, Holders: []driver.Entry{leader}})
	}
	return out, nil
}

// ownerEntry is the entry of an owner value with ttl left: the owner's random part,
// and the Holder record (with its Since) it carries.
func ownerEntry(value string, ttl time.Duration) driver.Entry {
	owner, h := redisops.OwnerOf(value)
	e := driver.Entry{Owner: owner, TTL: max(ttl, 0), Holder: h}
	if h != nil {
		e.Since = h.Since
	}
	return e
}

// ttlOf turns a PTTL into a time left (0 for no expiry, -1, or no key, -2).
func ttlOf(pttl int64) time.Duration { return max(time.Duration(pttl)*time.Millisecond, 0) }

// List finds the names under prefix by their keys — the fencing counters, the
// primitives' settings, the elections' terms and the queues of waiters — and
// describes each that something holds or waits for.
func (d *redisDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	return listNames(ctx, d.c, prefix, d.Describe, redisops.FencePrefix, "dlock:settings\xff", electionPrefix, queuePrefix)
}

// listNames scans c for the keys of each layout prefix (Tagged) whose name begins
// with prefix, and describes each name found.
func listNames(ctx context.Context, c redis.UniversalClient, prefix string, describe func(context.Context, string) ([]driver.KeyState, error), layouts ...string) ([]driver.KeyState, error) {
	names := map[string]bool{}
	for _, layout := range layouts {
		err := redisops.Scan(ctx, c, redisops.Glob(layout)+"*", func(k string) {
			if name, ok := redisops.NameAfterTag(layout, k); ok && strings.HasPrefix(name, prefix) {
				names[name] = true
			}
		})
		if err != nil {
			return nil, fmt.Errorf("scan %q: %w", layout, err)
		}
	}
	return generic.DescribeAll(ctx, names, describe)
}

// reply reads describe.lua's answer.
type reply []any

func (r reply) str(i int) string { s, _ := r[i].(string); return s }
func (r reply) int(i int) int64  { n, _ := r[i].(int64); return n }

type scored struct {
	member string
	score  int64
}

// pairs reads a WITHSCORES array: member, score, ….
func (r reply) pairs(i int) []scored {
	a, _ := r[i].([]any)
	var out []scored
	for j := 0; j+1 < len(a); j += 2 {
		m, _ := a[j].(string)
		s, _ := a[j+1].(string)
		f, _ := strconv.ParseFloat(s, 64)
		out = append(out, scored{m, int64(f)})
	}
	return out
}

// The SETNX variants keep a bare key per lock and nothing else: a random owner
// value (SETNXExpire) or the holder's expiry time by its own clock (SETNXGetSet),
// no token, no queue, nothing that tells a lock from other data. List therefore
// takes the string keys under a prefix whose value is of the variant's form.

var _ driver.Describer = (*setnxDriver)(nil)

func (d *setnxDriver) Describe(ctx context.Context, key string) ([]driver.KeyState, error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := d.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, pttl = p.Get(ctx, key), p.PTTL(ctx, key)
		return nil
	})
	if err == redis.Nil || (err != nil && get.Err() == redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, ok := d.state(key, get.Val(), pttl.Val())
	if !ok {
		return []driver.KeyState{{Key: key, Kind: driver.KindLock, Note: "the key holds a value the " + string(d.variant) + " algorithm did not write"}}, nil
	}
	return []driver.KeyState{st}, nil
}

// state is the lock whose key holds value with pttl left; ok is false when value is
// not of the variant's form.
func (d *setnxDriver) state(key, value string, pttl time.Duration) (driver.KeyState, bool) {
	st := driver.KeyState{Key: key, Kind: driver.KindLock}
	e := driver.Entry{Owner: value, TTL: max(pttl, 0)}
	switch d.variant {
	case SETNXGetSet:
		ms, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return st, false
		}
		e.TTL = max(time.Until(time.UnixMilli(ms)), 0)
		st.Note = "expiry by the holder's clock"
		if e.TTL == 0 {
			st.Note = "expired by this client's clock: the next taker takes it over"
		}
	default:
		if !redisops.IsOwnerValue(value) {
			return st, false
		}
		if pttl < 0 {
			st.Note = "the key has no expiry: a holder that died between SETNX and EXPIRE leaves it for ever"
		}
	}
	st.Holders = []driver.Entry{e}
	return st, true
}

// List scans the keys under prefix (a prefix is required: the variants' keys are
// bare names) and keeps those whose value is of the variant's form.
func (d *setnxDriver) List(ctx context.Context, prefix string) ([]driver.KeyState, error) {
	if prefix == "" {
		return nil, fmt.Errorf("the %s locks are bare keys, told from other data only by their value: give a prefix: %w", d.variant, errors.ErrUnsupported)
	}
	var keys []string
	if err := redisops.Scan(ctx, d.c, redisops.Glob(prefix)+"*", func(k string) { keys = append(keys, k) }); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	var out []driver.KeyState
	for _, k := range slices.Compact(keys) {
		states, err := d.Describe(ctx, k)
		if err != nil {
			continue // not a string (WRONGTYPE), or gone: not a lock of this algorithm
		}
		for _, s := range states {
			if len(s.Holders) > 0 {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
