package redisops

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Semaphores and read-write locks. For the primitive named key:
//
//	holders:  "dlock:holders\xff{" + tag + "}" + key  (a sorted set: owner value → expiry, ms on the server's clock)
//	settings: "dlock:settings\xff{" + tag + "}" + key (a hash: kind, limit, writer)
//	fence:    "dlock:primfence\xff{" + tag + "}" + key (an integer, never expires)
//
// with tag as for FenceKey, so that all three sit in the hash slot of key (and of
// its mutex). None is valid UTF-8, so no mutex key (the name itself) is one of them.
// A key's semaphore and read-write lock share the holders and settings: the
// settings' kind tells them apart, and an acquire of the other kind while holders
// live is refused (a conflict). Holders and settings expire with the last holder.

var (
	//go:embed prim_acquire.lua
	primAcquireSrc string
	//go:embed prim_refresh.lua
	primRefreshSrc string
	//go:embed prim_release.lua
	primReleaseSrc string

	primAcquireScript = redis.NewScript(primAcquireSrc)
	primRefreshScript = redis.NewScript(primRefreshSrc)
	primReleaseScript = redis.NewScript(primReleaseSrc)
)

// PrimitiveKeys returns the holders, settings and fence keys of key's primitive.
func PrimitiveKeys(key string) []string {
	return []string{tagged("dlock:holders\xff", key), tagged("dlock:settings\xff", key), tagged("dlock:primfence\xff", key)}
}

// Primitive kinds and read-write modes as the scripts name them.
const (
	KindSemaphore = "semaphore"
	KindRWLock    = "rwlock"
	Shared        = "shared"
	Exclusive     = "exclusive"
)

// PrimResult is the outcome of PrimAcquire.
type PrimResult struct {
	Granted   bool
	Token     uint64
	Remaining time.Duration // when full: until the first holder expires
	// Conflict, when not empty, says how the key is held instead: the other kind,
	// or a semaphore's other limit.
	Conflict string
}

// PrimAcquire takes a lease of key's semaphore (kind KindSemaphore, arg the limit)
// or read-write lock (kind KindRWLock, arg Shared or Exclusive) for the owner value
// and ttl, in one script. An error is as for Acquire: the lease may have been
// granted (release it with the same value), unless it is a reply error.
func PrimAcquire(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration, kind, arg string) (PrimResult, error) {
	res, err := primAcquireScript.Run(ctx, c, PrimitiveKeys(key), value, Millis(ttl), kind, arg).Slice()
	if err != nil {
		return PrimResult{}, err
	}
	if len(res) != 2 {
		return PrimResult{}, fmt.Errorf("redisops: primitive acquire script returned %v", res)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		tok, _ := res[1].(int64)
		if tok <= 0 {
			return PrimResult{}, fmt.Errorf("redisops: fencing counter of %q returned %v", key, res[1])
		}
		return PrimResult{Granted: true, Token: uint64(tok)}, nil
	case 0:
		ms, _ := res[1].(int64)
		return PrimResult{Remaining: max(time.Duration(ms)*time.Millisecond, 0)}, nil
	case -1:
		return PrimResult{Conflict: fmt.Sprintf("held as a %v", res[1])}, nil
	case -2:
		return PrimResult{Conflict: fmt.Sprintf("held as a semaphore with limit %v", res[1])}, nil
	}
	return PrimResult{}, fmt.Errorf("redisops: primitive acquire script returned %v", res)
}

// PrimRefresh sets the expiry of the owner's lease of key's primitive to ttl from
// now; false when the lease is gone.
func PrimRefresh(ctx context.Context, c redis.Scripter, key, value string, ttl time.Duration) (bool, error) {
	n, err := primRefreshScript.Run(ctx, c, PrimitiveKeys(key)[:2], value, Millis(ttl)).Int64()
	return n == 1, err
}

// PrimRelease removes the owner's lease of key's primitive and publishes on the
// channel of wake (Channel(wake)) so that waiters look again; false when the lease
// had expired or was gone.
func PrimRelease(ctx context.Context, c redis.Scripter, key, value, wake string) (bool, error) {
	n, err := primReleaseScript.Run(ctx, c, PrimitiveKeys(key)[:2], value, Channel(wake)).Int64()
	return n == 1, err
}
