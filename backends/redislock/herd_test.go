package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/servers"
)

// TestReleaseWakesOne: in the default mode a release wakes one waiter, not every
// waiter of the key, so a hand-off costs the store the same few requests however
// many wait. 100 waiters, each a client of its own, queue behind a holder; each
// releases as soon as it is granted; the store's count of script runs (the only
// requests the lock sends) over the 100 hand-offs is at most 3 per hand-off (the
// release, the woken waiter's grant, and slack for a renewal). Woken all at once,
// every waiter would look at every release: about 50 runs per hand-off.
func TestReleaseWakesOne(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{{"default", nil}, {"fifo", []redislock.Option{redislock.WithFIFO(true)}}} {
		t.Run(mode.name, func(t *testing.T) {
			addr := privateRedis(t, servers.RedisOptions{}).Addr()
			admin := client(t, addr)
			k := uniqueKey("herd")
			const n = 100
			holder := redislock.New(client(t, addr), mode.opts...)
			defer holder.Close()
			lh, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, n)
			for range n {
				l := redislock.New(client(t, addr), mode.opts...)
				defer l.Close()
				go func() {
					ls, err := l.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
					if err == nil {
						err = ls.Release(context.Background())
					}
					done <- err
				}()
			}
			waitWaiters(t, admin, k, n)
			if err := admin.ConfigResetStat(ctxFor(t, 10*time.Second)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			runs := scriptRuns(t, addr)
			t.Logf("%d script runs for %d hand-offs (%.2f each)", runs, n, float64(runs)/n)
			if runs > 3*n {
				t.Errorf("%d script runs for %d hand-offs (%.1f each), want at most 3 each: a release woke more than one waiter", runs, n, float64(runs)/n)
			}
		})
	}
}

// waitWaiters waits until n clients wait for k: in its queue, or (a waiter that
// looks at every release) listening on its release channel.
func waitWaiters(t testing.TB, c *redis.Client, k string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs, err := c.PubSubNumSub(ctxFor(t, 10*time.Second), redisops.Channel(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if max(waiting(t, c, k), int(subs[redisops.Channel(k)])) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters after 30s, want %d", max(waiting(t, c, k), int(subs[redisops.Channel(k)])), n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}

// scriptRuns is the number of scripts the server at addr ran since its statistics
// were last reset (EVAL and EVALSHA, as go-redis sends them).
func scriptRuns(t testing.TB, addr string) int {
	t.Helper()
	n, err := servers.RedisScriptRuns(ctxFor(t, 10*time.Second), addr)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// TestFairAfterScriptFlush: the fair engine (the default mode and fifo) sends
// fair.lua by its SHA; a server that no longer has the script (a restart, SCRIPT
// FLUSH) gets the script itself, on TryAcquire, on a waiter's Acquire and on
// Release. A private server: flushing the shared one would change what other tests
// see.
func TestFairAfterScriptFlush(t *testing.T) {
	addr := privateRedis(t, servers.RedisOptions{}).Addr()
	admin := client(t, addr)
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{{"default", nil}, {"fifo", []redislock.Option{redislock.WithFIFO(true)}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := ctxFor(t, 10*time.Second)
			flush := func() {
				t.Helper()
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			l := redislock.New(client(t, addr), mode.opts...)
			defer l.Close()
			k := uniqueKey("flush-" + mode.name)
			flush()
			ls, err := l.TryAcquire(ctx, k)
			if err != nil {
				t.Fatalf("TryAcquire after SCRIPT FLUSH: %v", err)
			}
			// A waiter joins the queue (its first attempt after a flush).
			flush()
			got := make(chan error, 1)
			go func() {
				lw, err := l.Acquire(ctx, k)
				if err == nil {
					err = lw.Release(ctx)
				}
				got <- err
			}()
			for waiting(t, admin, k) == 0 {
				select {
				case err := <-got:
					t.Fatalf("the waiter ended before it queued: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			flush()
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("Release after SCRIPT FLUSH: %v", err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter after SCRIPT FLUSH: %v", err)
			}
		})
	}
}
