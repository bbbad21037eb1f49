package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/conformance"
)

// setnxHarness gives the suite clients of NewSETNX(variant).
type setnxHarness struct {
	addr    string
	variant redislock.Variant
	admin   *redis.Client
}

func newSETNXHarness(t testing.TB, v redislock.Variant) *setnxHarness {
	addr := sharedRedis(t).Addr()
	return &setnxHarness{addr: addr, variant: v, admin: client(t, addr)}
}

func (h *setnxHarness) NewLocker(t testing.TB) dlock.Locker {
	return redislock.NewSETNX(client(t, h.addr), h.variant)
}

// weaknesses says what each variant gets wrong (see redislock.Variant).

func (h *setnxHarness) Capabilities() conformance.Capabilities {
	return conformance.MustDeclare("redis+setnx://?variant=" + url.QueryEscape(string(h.variant)))
}

func (h *setnxHarness) DeleteKey(t testing.TB, key string) { deleteKey(t, h.admin, key) }

// ReproduceWeakness runs the fault each variant's weakness needs: a holder that dies
// between SETNX and EXPIRE, or a client whose clock runs ahead.
func (h *setnxHarness) ReproduceWeakness(t *testing.T, p conformance.Property) ([]string, bool) {
	switch {
	case h.variant == redislock.SETNXExpire && p == conformance.DeadlockFreedom:
		return h.crashBetweenSETNXAndExpire(t), true
	case h.variant == redislock.SETNXGetSet && p == conformance.MutualExclusion:
		return h.clockAheadTakesOver(t), true
	}
	return nil, false
}

// errCrashed is what every command of a crashed client returns.
var errCrashed = errors.New("test: the client process died here")

// crashAfterSETNX is a go-redis hook that lets commands through until a SETNX
// succeeds and then fails every later command without sending it: from the server's
// side, the client died right after SETNX.
type crashAfterSETNX struct{ dead atomic.Bool }

func (c *crashAfterSETNX) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *crashAfterSETNX) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.dead.Load() {
			return errCrashed
		}
		return next(ctx, cmds)
	}
}
func (c *crashAfterSETNX) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.dead.Load() {
			cmd.SetErr(errCrashed)
			return errCrashed
		}
		err := next(ctx, cmd)
		if r, ok := cmd.(*redis.Cmd); ok && strings.EqualFold(cmd.Name(), "setnx") {
			if set, _ := r.Bool(); set {
				c.dead.Store(true)
			}
		}
		return err
	}
}

func (h *setnxHarness) crashBetweenSETNXAndExpire(t *testing.T) []string {
	k := fmt.Sprintf("setnx-crash/%d", time.Now().UnixNano())
	ttl := 300 * time.Millisecond
	dying := client(t, h.addr)
	dying.AddHook(&crashAfterSETNX{})
	a := redislock.NewSETNX(dying, redislock.SETNXExpire)
	defer a.Close()
	if _, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl)); !errors.Is(err, errCrashed) {
		t.Fatalf("the crashing holder's TryAcquire: want the crash between SETNX and EXPIRE, got %v", err)
	}
	t.Cleanup(func() { h.admin.Del(context.Background(), k) })
	b := redislock.NewSETNX(client(t, h.addr), redislock.SETNXExpire)
	defer b.Close()
	wait := 10 * ttl
	_, err := b.Acquire(ctxFor(t, wait), k, dlock.WithTTL(ttl))
	if err == nil {
		return nil
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire after the crash: %v", err)
	}
	pttl, err := h.admin.PTTL(ctxFor(t, 10*time.Second), k).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl != -1 { // go-redis reports PTTL -1 (no expiry) as -1ns
		t.Fatalf("PTTL %q after the crash: %v, want -1 (no expiry)", k, pttl)
	}
	return []string{fmt.Sprintf("a holder that died between SETNX and EXPIRE (ttl %v) still holds %q %v later, with no expiry: never freed",
		ttl, k, wait)}
}

func (h *setnxHarness) clockAheadTakesOver(t *testing.T) []string {
	k := fmt.Sprintf("setnx-clock/%d", time.Now().UnixNano())
	const skew = time.Minute
	ttl := 30 * time.Second
	a := redislock.NewSETNX(client(t, h.addr), redislock.SETNXGetSet)
	defer a.Close()
	ahead := redislock.NewSETNXWithClock(client(t, h.addr), redislock.SETNXGetSet,
		func() time.Time { return time.Now().Add(skew) })
	defer ahead.Close()
	res := conformance.NewResource(false)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	res.Enter("holder", la.Token())
	lb, err := ahead.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
	case err != nil:
		t.Fatal(err)
	default:
		res.Enter("client-ahead", lb.Token())
		res.Leave("client-ahead")
		_ = lb.Release(ctxFor(t, 10*time.Second))
	}
	res.Leave("holder")
	_ = la.Release(ctxFor(t, 10*time.Second))
	var out []string
	for _, o := range res.Overlaps() {
		out = append(out, fmt.Sprintf("a client whose clock runs %v ahead took over a lock held for %v: %s", skew, ttl, o))
	}
	return out
}

// TestConformanceSETNX runs the suite on both classic variants. Each declares its
// weaknesses: OwnerOnlyRelease (a stale holder's DEL frees its successor's lock,
// shown by the generic check) and the one it needs a fault for (ReproduceWeakness:
// the crash between SETNX and EXPIRE, or a client whose clock runs ahead), which
// the generic check must not show without the fault.
func TestConformanceSETNX(t *testing.T) {
	for _, v := range []redislock.Variant{redislock.SETNXExpire, redislock.SETNXGetSet} {
		t.Run(string(v), func(t *testing.T) {
			conformance.Run(t, newSETNXHarness(t, v))
		})
	}
}
