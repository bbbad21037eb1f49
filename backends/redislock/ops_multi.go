package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// setKeys returns the lock keys of keys followed by their fence keys.
func setKeys(keys []string, fence bool) []string {
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, redisops.LockKey(k))
	}
	if fence {
		for _, k := range keys {
			out = append(out, redisops.FenceKey(k))
		}
	}
	return out
}

// acquireAll takes the locks named keys for the owner value for ttl if none of them
// is held, in one script, each with its own fencing token (its fence counter, as
// Acquire counts it). It returns acquired true and the tokens in the order of keys,
// or acquired false and the remaining TTL of a held one. The keys must share one
// Redis Cluster hash slot (a single node has them all). Errors are as Acquire's:
// after an error that is not a reply the locks may be set (releaseAll undoes them).
func acquireAll(ctx context.Context, c redis.Scripter, keys []string, value string, ttl time.Duration) (tokens []uint64, remaining time.Duration, acquired bool, err error) {
	res, err := acquireAllScript.Run(ctx, c, setKeys(keys, true), value, redisops.Millis(ttl)).Int64Slice()
	if err != nil {
		return nil, 0, false, err
	}
	switch {
	case len(res) == 2 && res[0] == 0:
		return nil, max(time.Duration(res[1])*time.Millisecond, 0), false, nil
	case len(res) != len(keys)+1 || res[0] != 1:
		return nil, 0, false, fmt.Errorf("acquire_all script returned %v for %d keys", res, len(keys))
	}
	for _, t := range res[1:] {
		tokens = append(tokens, uint64(t))
	}
	return tokens, 0, true, nil
}

// refreshAll sets the TTL of every lock of keys to ttl if all still hold value. If
// one does not, it releases those that do and returns false.
func refreshAll(ctx context.Context, c redis.Scripter, keys []string, value string, ttl time.Duration) (bool, error) {
	n, err := refreshAllScript.Run(ctx, c, setKeys(keys, false), value, redisops.Millis(ttl), redisops.ChannelPrefix).Int64()
	return n == 1, err
}

// releaseAll deletes every lock of keys that still holds value, announcing each on
// its release channel, and reports whether all of them did. Like Release it is
// idempotent: run again after its reply was lost, it counts the locks it deleted.
func releaseAll(ctx context.Context, c redis.Scripter, keys []string, value string) (bool, error) {
	ks := setKeys(keys, false)
	for _, k := range keys {
		ks = append(ks, redisops.ReleasedKey(k, value))
	}
	n, err := releaseAllScript.Run(ctx, c, ks, value, redisops.ChannelPrefix).Int64()
	return int(n) == len(keys), err
}
