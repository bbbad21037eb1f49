package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Sets of keys (dlock.AcquireAll): one script takes every key or none, each with
// its own fencing token, as the mutex takes one, and a waiting set is in the queue
// of every one of its keys at once (fair_all.lua): it is granted as a waiter of one
// key is, once no one who arrived before it waits for any of its keys, so it is
// not passed over for ever by single-key waiters or other sets. Redis Cluster runs
// a script on one node, so only keys of one hash slot (a shared hash tag:
// "{user42}/a", "{user42}/b") are taken in one step; dlock takes any other set key
// by key, without that bound.

var (
	_ driver.MultiLocker = fairDriver{}
	_ driver.MultiWaiter = fairDriver{}
)

// oneStep returns an error wrapping errors.ErrUnsupported when d's client cannot
// run one script on every key of keys.
func (d *redisDriver) oneStep(keys []string) error {
	switch c := d.c.(type) {
	case *redis.Client: // one node (or a Sentinel failover client) holds every key
	case *redis.ClusterClient:
		slot := redisops.Slot(keys[0])
		for _, k := range keys[1:] {
			if redisops.Slot(k) != slot {
				return fmt.Errorf("keys %q and %q are in different cluster slots: %w", keys[0], k, errors.ErrUnsupported)
			}
		}
	default:
		return fmt.Errorf("sets of keys in one script need a *redis.Client or *redis.ClusterClient, not %T: %w", c, errors.ErrUnsupported)
	}
	return nil
}

// TryLockAll takes every key if each is free and no one waits ahead of the caller
// on any (as TryLock does for one key).
func (d fairDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	if err := d.oneStep(keys); err != nil {
		return nil, err
	}
	lk, res, err := d.attemptAll(ctx, keys, redisops.NewOwner(ctx), ttl, false)
	if lk != nil || err != nil {
		return lk, err
	}
	return nil, driver.Busy(res.Holder)
}

// LockAll joins the queue of every key and waits until the set is its turn: woken
// by a release of any of its keys that names it, and otherwise as Lock is (at each
// renewal of its places and when a holder's TTL runs out). When ctx ends it leaves
// every queue (and gives back a set granted to a request whose reply it did not
// wait for).
func (d fairDriver) LockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	if err := d.oneStep(keys); err != nil {
		return nil, err
	}
	value := redisops.NewOwner(ctx)
	return waitTurn(ctx, ttl,
		func(ctx context.Context) (driver.Lock, fairResult, error) {
			return d.attemptAll(ctx, keys, value, ttl, true)
		},
		func(ctx context.Context) (<-chan struct{}, func(), error) {
			return d.releases.SubscribeTurns(ctx, keys, value)
		},
		func() { d.leaveAll(keys, value) })
}

// attemptAll runs fair_all.lua's acquire once for value (joining or staying in
// every queue with wait); on an error after which the script may have run it
// leaves the queues and gives back what it may have been granted.
func (d fairDriver) attemptAll(ctx context.Context, keys []string, value string, ttl time.Duration, wait bool) (driver.Lock, fairResult, error) {
	var tokens []uint64
	var res fairResult
	sent := time.Now()
	err := d.write(ctx, keys[0], func(s redis.Scripter) (bool, error) {
		var err error
		tokens, res, err = acquireAll(ctx, s, keys, value, ttl, d.window, wait)
		return res.Acquired, err
	})
	if err != nil {
		leaveIfSent(err, res.Acquired, wait, func() { d.leaveAll(keys, value) })
		return nil, res, err
	}
	if !res.Acquired {
		return nil, res, nil
	}
	return &redisSet{d: d.redisDriver, keys: keys, value: value, tokens: tokens, validFrom: sent}, res, nil
}

// leaveAll takes value out of every queue of keys and gives back the locks it
// holds, best effort, with a fresh context (as leave).
func (d fairDriver) leaveAll(keys []string, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = releaseAll(ctx, d.c, keys, value, true)
}

// redisSet is one grant of a set of keys, all holding one owner value.
type redisSet struct {
	d      *redisDriver
	keys   []string
	value  string
	tokens []uint64
	// validFrom is when the request that granted the set was sent.
	validFrom time.Time
}

func (s *redisSet) Token() uint64        { return slices.Max(s.tokens) }
func (s *redisSet) Tokens() []uint64     { return slices.Clone(s.tokens) }
func (s *redisSet) ValidFrom() time.Time { return s.validFrom }

func (s *redisSet) Refresh(ctx context.Context, ttl time.Duration) error {
	return s.d.refresh(ctx, s.keys[0], func(sc redis.Scripter) (bool, error) {
		return refreshAll(ctx, sc, s.keys, s.value, ttl)
	})
}

func (s *redisSet) Unlock(ctx context.Context) error {
	return heldUnless(releaseAll(ctx, s.d.c, s.keys, s.value, false))
}
