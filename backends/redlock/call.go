// A script request built once per round. A round sends the same script, keys and
// arguments to every master; building the command once (not once per master) saves
// the key names, the boxing of each argument and go-redis's argument slice, about
// a fifth of an uncontended Acquire+Release's allocations.

package redlock

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
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
}

// newCall lays out s run with keys and args.
func newCall(s luaScript, keys []string, args ...any) scriptCall {
	a := make([]any, 0, 3+len(keys)+len(args))
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

// run sends c to cl and returns the script's reply. When the master lacks the script
// (NOSCRIPT: its first request, a restart, SCRIPT FLUSH) it sends the source with
// EVAL, as redis.Script.Run does, from a copy of the arguments: other masters'
// requests may be reading them.
func (c scriptCall) run(ctx context.Context, cl redis.UniversalClient) (any, error) {
	v, err := process(ctx, cl, c.args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		a := slices.Clone(c.args)
		a[0], a[1] = "eval", c.src
		v, err = process(ctx, cl, a)
	}
	return v, err
}

// process sends the script command args to cl (the keys from the fourth argument
// on, which a Redis Cluster client routes by).
func process(ctx context.Context, cl redis.UniversalClient, args []any) (any, error) {
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	err := cl.Process(ctx, cmd)
	return cmd.Val(), err
}
