// Package redisfence is a fencing guard (package fence) for Redis: the fence of a
// resource is a hash in Redis, and a guarded SET, HSET or DEL runs with the rule
// in one Lua script (guard.lua), so that the check and the write are one atomic
// step of the server.
//
// The script reads the fence (HMGET token writer), refuses a token below it or an
// equal one from another writer, else makes the write and, for a larger token,
// moves the fence (HSET). Tokens travel as 20 zero-padded decimal digits and are
// compared digit by digit: all of uint64, exactly (Lua's numbers are doubles).
//
// Keys. The fence of resource is Key(resource): "dlock:guard\xff{" + tag + "}" +
// resource, where tag is what Redis Cluster hashes of the resource name read as a
// key (its hash tag, or the whole name), so that the fence sits in the resource's
// hash slot. The keys a guarded write touches must be in that slot too, or Redis
// Cluster refuses the script (CROSSSLOT): name them with the resource's hash tag —
// e.g. resource "invoice:{42}" and keys "invoice:{42}", "invoice:{42}:lines" — or
// use the resource's name itself as the key (but not on the server where redislock
// keeps that name's lock: its lock key is the name itself). On one server (no
// Cluster) any keys work. A resource whose hashed part holds a '}' (a name without a hash tag, such
// as "a}b") cannot have its slot named by a tag: it is fence.ErrInvalid.
//
// A Redis ACL user of the guard needs EVALSHA, EVAL, HMGET, HSET and the commands
// of its writes (SET, DEL), on the fence keys ("~dlock:guard*") and the keys written.
//
// Not guaranteed: Redis replicates and persists asynchronously by default. A
// failover to a replica that had not received the latest fence, or a restart
// without persistence (or with appendfsync everysec, up to a second of writes),
// forgets fences, and the guard then accepts a stale grant's token again (once per
// forgotten fence). Keep the guard on a server that keeps its writes
// (appendfsync always, no failover, or WAIT on the replicas: none of which this
// package does for you). Writes that do not go through the guard are not guarded.
package redisfence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/fence"
)

//go:embed guard.lua
var guardLua string

var guardScript = redis.NewScript(guardLua)

// KeyPrefix starts every fence key; "SCAN 0 MATCH dlock:guard*" lists them. The
// byte 0xff never occurs in UTF-8, so no fence key is a resource's own name.
const KeyPrefix = "dlock:guard\xff"

// Guard is a fence.Guard whose fences are Redis hashes. Safe for concurrent use.
type Guard struct {
	c redis.UniversalClient
}

// New returns the guard of the fences on the server (or Cluster) c talks to. The
// caller keeps c.
func New(c redis.UniversalClient) *Guard { return &Guard{c: c} }

// Key returns the Redis key of resource's fence (a hash: token, writer), in the
// resource's hash slot; fence.ErrInvalid for a resource whose slot no tag names
// (see the package documentation).
func Key(resource string) (string, error) {
	tag := hashed(resource)
	if strings.IndexByte(tag, '}') >= 0 {
		return "", fmt.Errorf("%w: resource %q: Redis Cluster hashes all of it and it holds a '}', so no fence key can share its slot; give it a hash tag", fence.ErrInvalid, resource)
	}
	return KeyPrefix + "{" + tag + "}" + resource, nil
}

// hashed is the part of key that Redis Cluster hashes: the text between the first
// '{' and the next '}' when it is not empty, else the whole key.
func hashed(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Check applies the rule (see fence.Guard); the fence moves for a larger token, and
// nothing else is written.
func (g *Guard) Check(ctx context.Context, resource string, token uint64, writer string) error {
	return g.run(ctx, resource, token, writer, nil, "check")
}

// Set is the guarded SET key value (with PX ttl, rounded up to a millisecond, when
// ttl > 0; without expiry when ttl is 0): it lands only if the rule accepts token
// and writer for resource, in the same script that decides.
// key must be in the resource's hash slot on a Cluster (see the package
// documentation). A refusal is fence.ErrStale; a Redis error comes back wrapped,
// and then the write did not land.
func (g *Guard) Set(ctx context.Context, resource string, token uint64, writer, key, value string, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: Set of %q: ttl %v", fence.ErrInvalid, key, ttl)
	}
	px := (ttl + time.Millisecond - 1).Milliseconds()
	return g.run(ctx, resource, token, writer, []string{key}, "set", value, strconv.FormatInt(px, 10))
}

// HSet is the guarded HSET key field value [field value …] (see Set); fieldValues
// alternate fields and values, and there must be at least one pair.
func (g *Guard) HSet(ctx context.Context, resource string, token uint64, writer, key string, fieldValues ...string) error {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return fmt.Errorf("%w: HSet of %q: want field, value pairs, got %d strings", fence.ErrInvalid, key, len(fieldValues))
	}
	return g.run(ctx, resource, token, writer, []string{key}, "hset", fieldValues...)
}

// Del is the guarded DEL key [key …] (see Set); there must be at least one key.
func (g *Guard) Del(ctx context.Context, resource string, token uint64, writer string, keys ...string) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: Del of %q: no keys", fence.ErrInvalid, resource)
	}
	return g.run(ctx, resource, token, writer, keys, "del")
}

func (g *Guard) run(ctx context.Context, resource string, token uint64, writer string, keys []string, op string, args ...string) error {
	if err := fence.Validate(resource, token, writer); err != nil {
		return err
	}
	fk, err := Key(resource)
	if err != nil {
		return err
	}
	argv := append([]any{fmt.Sprintf("%020d", token), writer, op}, toAny(args)...)
	res, err := guardScript.Run(ctx, g.c, append([]string{fk}, keys...), argv...).Slice()
	if err != nil {
		return fmt.Errorf("redisfence: %q: %w", resource, err)
	}
	if len(res) == 1 && res[0] == int64(1) {
		return nil
	}
	if len(res) == 3 {
		reason, _ := res[1].(string)
		f, _ := res[2].(string)
		fenceTok, err := strconv.ParseUint(f, 10, 64)
		if err == nil && (reason == string(fence.BelowFence) || reason == string(fence.OtherWriter)) {
			return &fence.StaleError{Resource: resource, Token: token, Reason: fence.Reason(reason), Fence: fenceTok}
		}
	}
	return errors.New("redisfence: the guard script answered " + fmt.Sprint(res))
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
