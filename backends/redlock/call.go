// A script request built once per round. A round sends the same script, keys and
// arguments to every master; building the command once (not once per master) saves
// the key names, the boxing of each argument and go-redis's argument slice, about
// a fifth of an uncontended Acquire+Release's allocations.

package redlock

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
)

// luaScript is one of the package's scripts: its source and SHA1 digest.
type luaScript struct{ src, hash string }

func newScript(src string) luaScript { return luaScript{src: src, hash: redis.NewScript(src).Hash()} }

// scriptCall is one invocation of a script, laid out as the command go-redis sends:
// EVALSHA, the digest, the number of keys, the keys, the arguments. Every master's
// request of a round sends the same slice; nothing writes it once built, so the
// requests read it in parallel.
type scriptCall struct {
	src  string
	args []any
	set  []any // a free lock's vote as SET NX PX (voteCall without a queue), or nil
}

// newCall lays out s run with keys and args.
func newCall(s luaScript, keys []string, args ...any) scriptCall {
	return newCallRoom(s, 0, keys, args...)
}

// newCallRoom is newCall with room for spare more values after the arguments, in
// the same array (one allocation for the script call and another command).
func newCallRoom(s luaScript, spare int, keys []string, args ...any) scriptCall {
	a := make([]any, 0, 3+len(keys)+len(args)+spare)
	a = append(a, "evalsha", s.hash, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return scriptCall{src: s.src, args: append(a, args...)}
}

// with returns a copy of c whose argument i (0 = the script's first ARGV) is v.
func (c scriptCall) with(i int, v any) scriptCall {
	a := slices.Clone(c.args)
	a[3+a[2].(int)+i] = v
	return scriptCall{src: c.src, args: a}
}

// run sends c to cl and returns the script's reply (redisops.RunScript: other
// masters' requests may be reading the arguments).
func (c scriptCall) run(ctx context.Context, cl redis.UniversalClient) (any, error) {
	return redisops.RunScript(ctx, cl, c.args, c.src)
}
