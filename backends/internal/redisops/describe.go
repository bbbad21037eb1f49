package redisops

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// What the Redis backends' inspection (dlock.Describe, dlock.List) shares: the walk
// over a deployment's keys, and how an owner value is told from other data.

// Scan calls found with every key of c's deployment that matches the glob pattern
// match (on every master of a Redis Cluster), each once per master that has it. It
// reads in pages (SCAN), so a key written or deleted meanwhile may be missed or
// seen. found is never called twice at once.
func Scan(ctx context.Context, c redis.UniversalClient, match string, found func(key string)) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, n redis.Cmdable) error {
		it := n.Scan(ctx, 0, match, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			found(it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	}
	return scan(ctx, c)
}

// Glob escapes s for a MATCH pattern: every byte stands for itself (key layouts
// hold bytes that are not UTF-8).
func Glob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// NameAfterTag returns the lock name in a key laid out by Tagged(prefix, name): what
// follows the "{tag}" after prefix (a tag holds no '}'). ok is false for a key of
// another layout.
func NameAfterTag(prefix, key string) (name string, ok bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", false
	}
	return rest[i+1:], true
}

// IsOwnerValue reports whether v is an owner value of NewValue's or NewOwner's
// form: 32 lowercase hex digits, with or without a holder record after them. A lock
// key holding anything else was not set by dlock.
func IsOwnerValue(v string) bool {
	owner, _ := OwnerOf(v)
	if len(owner) != 32 {
		return false
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
