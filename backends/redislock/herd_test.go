package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/herdtest"
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
			done := herdtest.Churn(lockers(t, addr, n, mode.opts...), 1, func(l dlock.Locker) (dlock.Lease, error) {
				return l.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
			})
			waitWaiters(t, admin, k, n)
			awaitTurnListeners(t, admin, k, n) // each looks once more after it subscribes
			handOffRuns(t, admin, addr, []dlock.Lease{lh}, done, n)
		})
	}
}

// handOffRuns resets the statistics of the server at addr, releases held, waits
// for the n waiters (each of which releases as soon as it is granted) to report on
// done, and checks that the hand-offs cost the server at most 3 script runs each
// (the releases of held aside).
func handOffRuns(t *testing.T, admin *redis.Client, addr string, held []dlock.Lease, done <-chan error, n int) {
	t.Helper()
	if err := admin.ConfigResetStat(ctxFor(t, 10*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	for _, lh := range held {
		if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	runs := scriptRuns(t, addr)
	t.Logf("%d script runs for %d hand-offs (%.2f each)", runs, n, float64(runs)/float64(n))
	if runs > 3*n+len(held) {
		t.Errorf("%d script runs for %d hand-offs (%.1f each), want at most 3 each: a release woke more than one waiter", runs, n, float64(runs)/float64(n))
	}
}

// lockers returns n Lockers with opts, each on a client of its own to the server
// at addr, closed when t ends.
func lockers(t testing.TB, addr string, n int, opts ...redislock.Option) []dlock.Locker {
	ls := make([]dlock.Locker, n)
	for i := range ls {
		ls[i] = redislock.New(client(t, addr), opts...)
		t.Cleanup(func() { ls[i].Close() })
	}
	return ls
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

// TestPrimitiveReleaseWakesOne: a release of a semaphore's permit, of a read-write
// lock that writers wait for, or of an election's term wakes one waiter, not every
// waiter of the key. As TestReleaseWakesOne for the mutex: 100 waiters, each a
// client of its own, wait behind the holders (a semaphore of 2 permits, both held;
// a write lease; a leader);
// each releases as soon as it is granted; at most 3 script runs per hand-off. Woken
// all at once, every waiter would look at every release: about 50 runs per
// hand-off.
func TestPrimitiveReleaseWakesOne(t *testing.T) {
	for _, p := range []struct {
		name  string
		take  func(l dlock.Locker, k string) (dlock.Lease, error)
		held  int                   // leases the holder takes before the waiters come
		queue func(k string) string // the key of the waiters
		wake  func(k string) string // the name whose release channel the waiters' own channels extend
	}{
		{"semaphore", func(l dlock.Locker, k string) (dlock.Lease, error) {
			s, err := dlock.NewSemaphore(l, k, 2)
			if err != nil {
				return nil, err
			}
			return s.Acquire(ctxFor(t, time.Minute), dlock.WithTTL(time.Minute))
		}, 2, semaphoreWaiters, driver.SemaphoreWake},
		{"writers", func(l dlock.Locker, k string) (dlock.Lease, error) {
			m, err := dlock.NewRWMutex(l, k)
			if err != nil {
				return nil, err
			}
			return m.Acquire(ctxFor(t, time.Minute), dlock.WithTTL(time.Minute))
		}, 1, semaphoreWaiters, driver.RWWake},
		{"election", func(l dlock.Locker, k string) (dlock.Lease, error) {
			e, err := dlock.NewElection(l, k)
			if err != nil {
				return nil, err
			}
			return e.Campaign(ctxFor(t, time.Minute), "candidate", dlock.WithTTL(time.Minute))
		}, 1, func(k string) string { c, _ := redislock.CandidatesKeys(k); return c }, redislock.ElectionKey},
	} {
		t.Run(p.name, func(t *testing.T) {
			addr := privateRedis(t, servers.RedisOptions{}).Addr()
			admin := client(t, addr)
			k := uniqueKey("primherd")
			const n = 100
			holder := redislock.New(client(t, addr))
			defer holder.Close()
			var held []dlock.Lease
			for range p.held {
				lh, err := p.take(holder, k)
				if err != nil {
					t.Fatal(err)
				}
				held = append(held, lh)
			}
			done := herdtest.Churn(lockers(t, addr, n), 1, func(l dlock.Locker) (dlock.Lease, error) { return p.take(l, k) })
			awaitCard(t, admin, p.queue(k), n)
			// Each waiter looks once more right after it subscribes: wait for that
			// too, so that the count below holds hand-offs alone.
			awaitTurnListeners(t, admin, p.wake(k), n)
			handOffRuns(t, admin, addr, held, done, n)
		})
	}
}

// semaphoreWaiters is the key of the waiters of k's semaphore or of its read-write
// lock's writers.
func semaphoreWaiters(k string) string {
	w, _ := redislock.SemaphoreWaitKeys(k)
	return w
}

// TestReadersWaitForTheWriter: while a writer waits, the release of a read lease
// wakes that writer alone, not the readers kept out behind it. One reader holds, a
// writer waits, then 100 readers (each a client of its own) wait; the reader
// releases, the writer is granted and releases, and the 100 readers are granted
// together. That costs about one script run per grant: at most 1.25 per reader
// (with every waiter woken by every release it would be about 2: each reader looks
// once in vain when the first reader releases).
func TestReadersWaitForTheWriter(t *testing.T) {
	addr := privateRedis(t, servers.RedisOptions{}).Addr()
	admin := client(t, addr)
	k := uniqueKey("readherd")
	const n = 100
	rw := func(l dlock.Locker) *dlock.RWMutex {
		m, err := dlock.NewRWMutex(l, k)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	opt := dlock.WithTTL(time.Minute)
	first := redislock.New(client(t, addr))
	defer first.Close()
	lr, err := rw(first).AcquireShared(ctxFor(t, 10*time.Second), opt)
	if err != nil {
		t.Fatal(err)
	}
	wl := redislock.New(client(t, addr))
	defer wl.Close()
	wrote := make(chan error, 1)
	go func() {
		lw, err := rw(wl).Acquire(ctxFor(t, time.Minute), opt)
		if err == nil {
			err = lw.Release(context.Background())
		}
		wrote <- err
	}()
	for {
		if w, _ := admin.Get(ctxFor(t, 10*time.Second), redislock.WriterWaitKey(k)).Result(); w != "" {
			break
		}
		select {
		case err := <-wrote:
			t.Fatalf("the writer ended before it waited: %v", err)
		case <-time.After(time.Millisecond): // polling the server's state: there is no signal for it
		}
	}
	granted := make(chan dlock.Lease, n)
	failed := make(chan error, n)
	for range n {
		l := redislock.New(client(t, addr))
		defer l.Close()
		go func() {
			ls, err := rw(l).AcquireShared(ctxFor(t, time.Minute), opt)
			if err != nil {
				failed <- err
				return
			}
			granted <- ls
		}()
	}
	// Each reader listens on the read-write lock's channel, and so does the writer.
	awaitSubscribers(t, admin, driver.RWWake(k), n+1)
	if err := admin.ConfigResetStat(ctxFor(t, 10*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lr.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	var leases []dlock.Lease
	for range n {
		select {
		case ls := <-granted:
			leases = append(leases, ls)
		case err := <-failed:
			t.Fatal(err)
		}
	}
	runs := scriptRuns(t, addr)
	for _, ls := range leases {
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d script runs for %d readers", runs, n)
	if runs > n+n/4 {
		t.Errorf("%d script runs for %d readers, want at most %d: the release of a read lease woke the readers kept out by the waiting writer", runs, n, n+n/4)
	}
}

// awaitCard waits until the sorted set key has n members.
func awaitCard(t testing.TB, c *redis.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.ZCard(ctxFor(t, 10*time.Second), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(got) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d members in %q after 30s, want %d", got, key, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}

// awaitTurnListeners waits until n waiters listen on their own channels of wake
// (redisops.TurnChannel).
func awaitTurnListeners(t testing.TB, c *redis.Client, wake string, n int) {
	t.Helper()
	pattern := redisops.TurnChannel(wake, "*")
	deadline := time.Now().Add(30 * time.Second)
	for {
		chs, err := c.PubSubChannels(ctxFor(t, 10*time.Second), pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(chs) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters listen on their own channels after 30s, want %d", len(chs), n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}

// awaitSubscribers waits until n connections listen on wake's release channel.
func awaitSubscribers(t testing.TB, c *redis.Client, wake string, n int) {
	t.Helper()
	ch := redisops.Channel(wake)
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs, err := c.PubSubNumSub(ctxFor(t, 10*time.Second), ch).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int(subs[ch]) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners on %q after 30s, want %d", subs[ch], ch, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}

// TestWaiterThatStops: a semaphore waiter or a waiting candidate that stops asking
// (a crashed process; here a place written straight into the store) keeps its
// precedence until its place expires, no longer: a newcomer is refused the permit
// or term it was woken for, and the waiter behind it gets it once the place is
// gone, without a release to wake it.
func TestWaiterThatStops(t *testing.T) {
	for _, p := range []struct {
		name string
		keys func(k string) (waiters, deadlines string)
		// take asks for a permit or the term: at once, or waiting with ttl.
		take func(l dlock.Locker, k string, wait bool, ttl time.Duration) (dlock.Lease, error)
	}{
		{"semaphore", redislock.SemaphoreWaitKeys, func(l dlock.Locker, k string, wait bool, ttl time.Duration) (dlock.Lease, error) {
			s, err := dlock.NewSemaphore(l, k, 1)
			if err != nil {
				return nil, err
			}
			if wait {
				return s.Acquire(ctxFor(t, 30*time.Second), dlock.WithTTL(ttl))
			}
			return s.TryAcquire(ctxFor(t, 10*time.Second), dlock.WithTTL(ttl))
		}},
		{"election", redislock.CandidatesKeys, func(l dlock.Locker, k string, wait bool, ttl time.Duration) (dlock.Lease, error) {
			e, err := dlock.NewElection(l, k)
			if err != nil {
				return nil, err
			}
			if wait {
				return e.Campaign(ctxFor(t, 30*time.Second), "waiter", dlock.WithTTL(ttl))
			}
			return e.TryCampaign(ctxFor(t, 10*time.Second), "newcomer", dlock.WithTTL(ttl))
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			addr := privateRedis(t, servers.RedisOptions{}).Addr()
			admin := client(t, addr)
			ctx := ctxFor(t, 30*time.Second)
			k := uniqueKey("ghost")
			l := redislock.New(client(t, addr))
			defer l.Close()
			lh, err := p.take(l, k, false, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			waiters, deadlines := p.keys(k)
			now, err := admin.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.ZAdd(ctx, waiters, redis.Z{Score: 1, Member: "ghost"}).Err(); err != nil { // arrived long ago
				t.Fatal(err)
			}
			if err := admin.ZAdd(ctx, deadlines, redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: "ghost"}).Err(); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				ls, err := p.take(l, k, true, 3*time.Second) // looks again every second
				if err == nil {
					err = ls.Release(context.Background())
				}
				got <- err
			}()
			awaitCard(t, admin, waiters, 2)
			if err := lh.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if ls, err := p.take(l, k, false, time.Minute); !errors.Is(err, dlock.ErrNotAcquired) {
				if err == nil {
					_ = ls.Release(ctx)
				}
				t.Fatalf("a newcomer while a waiter that arrived long ago keeps its place: %v, want ErrNotAcquired", err)
			}
			select {
			case err := <-got:
				t.Fatalf("the waiter behind the stopped one ended before its place expired: %v", err)
			default:
			}
			// The stopped waiter's place runs out.
			if err := admin.ZAdd(ctx, deadlines, redis.Z{Score: 1, Member: "ghost"}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter behind the stopped one: %v", err)
			}
		})
	}
}
