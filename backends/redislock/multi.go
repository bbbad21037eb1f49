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
// its own fencing token, as the mutex takes one. Redis Cluster runs a script on
// one node, so only keys of one hash slot (a shared hash tag: "{user42}/a",
// "{user42}/b") are taken in one step; dlock takes any other set key by key.

var _ driver.MultiLocker = (*redisDriver)(nil)

func (d *redisDriver) TryLockAll(ctx context.Context, keys []string, ttl time.Duration) (driver.Lock, error) {
	switch c := d.c.(type) {
	case *redis.Client: // one node (or a Sentinel failover client) holds every key
	case *redis.ClusterClient:
		slot := redisops.Slot(keys[0])
		for _, k := range keys[1:] {
			if redisops.Slot(k) != slot {
				return nil, fmt.Errorf("keys %q and %q are in different cluster slots: %w", keys[0], k, errors.ErrUnsupported)
			}
		}
	default:
		return nil, fmt.Errorf("sets of keys in one script need a *redis.Client or *redis.ClusterClient, not %T: %w", c, errors.ErrUnsupported)
	}
	value := redisops.NewOwner(ctx)
	var tokens []uint64
	var remaining time.Duration
	var ok bool
	err := d.write(ctx, keys[0], func(s redis.Scripter) (bool, error) {
		var err error
		tokens, remaining, ok, err = acquireAll(ctx, s, keys, value, ttl)
		return ok, err
	})
	if err != nil {
		if ok || !redisops.IsReply(err) {
			cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			_, _ = releaseAll(cctx, d.c, keys, value)
			cancel()
		}
		return nil, err
	}
	if !ok {
		return nil, driver.Busy(remaining)
	}
	return &redisSet{d: d, keys: keys, value: value, tokens: tokens}, nil
}

// redisSet is one grant of a set of keys, all holding one owner value.
type redisSet struct {
	d      *redisDriver
	keys   []string
	value  string
	tokens []uint64
}

func (s *redisSet) Token() uint64    { return slices.Max(s.tokens) }
func (s *redisSet) Tokens() []uint64 { return slices.Clone(s.tokens) }

func (s *redisSet) Refresh(ctx context.Context, ttl time.Duration) error {
	return s.d.refresh(ctx, s.keys[0], func(sc redis.Scripter) (bool, error) {
		return refreshAll(ctx, sc, s.keys, s.value, ttl)
	})
}

func (s *redisSet) Unlock(ctx context.Context) error {
	return heldUnless(releaseAll(ctx, s.d.c, s.keys, s.value))
}
