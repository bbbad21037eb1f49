package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

func key(t testing.TB) string { return "redlock-test/" + t.Name() }

func kill(t testing.TB, rs ...*servers.Redis) {
	t.Helper()
	for _, r := range rs {
		if err := r.Kill(); err != nil {
			t.Fatal(err)
		}
	}
}

// restartEmpty starts killed masters again without their data (no persistence).
func restartEmpty(t testing.TB, rs ...*servers.Redis) {
	t.Helper()
	for _, r := range rs {
		if err := r.Restart(ctxFor(t, startTimeout), false); err != nil {
			t.Fatal(err)
		}
	}
}

func pause(t testing.TB, rs ...*servers.Redis) {
	t.Helper()
	for _, r := range rs {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Resume() })
	}
}

func resume(t testing.TB, rs ...*servers.Redis) {
	t.Helper()
	for _, r := range rs {
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

func live(ls dlock.Lease) bool {
	select {
	case <-ls.Done():
		return false
	default:
		return true
	}
}

// With 2 of 5 masters dead the lock service works and still excludes.
func TestTwoOfFiveKilledStillGranted(t *testing.T) {
	rs := privateMasters(t, masters, false)
	a, b := newLocker(t, rs), newLocker(t, rs)
	warm(t, a)
	warm(t, b)
	kill(t, rs[0], rs[1])
	k := key(t)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("2 of 5 masters down: TryAcquire: %v", err)
	}
	if _, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("2 of 5 masters down, lock held: second TryAcquire: want ErrNotAcquired, got %v", err)
	}
	if err := la.Refresh(ctxFor(t, 10*time.Second), 10*time.Second); err != nil {
		t.Fatalf("Refresh with 3 of 5 masters: %v", err)
	}
	if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("Release with 3 of 5 masters: %v", err)
	}
	lb, err := b.Acquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	if err := lb.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// unavailableBound is how soon ErrUnavailable must come: a few per-node timeouts
// (the default one for the default TTL is 100ms), with room for a loaded machine.
var unavailableBound = 10 * redlock.NodeTimeout(dlock.DefaultTTL)

// With 3 of 5 masters dead, TryAcquire and Acquire (which would otherwise retry
// forever) return ErrUnavailable promptly.
func TestThreeOfFiveKilledUnavailable(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l := newLocker(t, rs)
	warm(t, l)
	kill(t, rs[0], rs[1], rs[2])
	for _, try := range []bool{true, false} {
		t0 := time.Now()
		var err error
		if try {
			_, err = l.TryAcquire(ctxFor(t, time.Minute), key(t)+"/try")
		} else {
			_, err = l.Acquire(ctxFor(t, time.Minute), key(t)+"/acquire")
		}
		took := time.Since(t0)
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("3 of 5 masters down (TryAcquire %v): want ErrUnavailable, got %v", try, err)
		}
		if took > unavailableBound {
			t.Errorf("3 of 5 masters down (TryAcquire %v): ErrUnavailable after %v, want within %v", try, took, unavailableBound)
		}
		t.Logf("TryAcquire %v: ErrUnavailable after %v: %v", try, took.Round(time.Millisecond), err)
	}
}

// With 3 of 5 masters hung (SIGSTOP: connections open, no answers), ErrUnavailable
// comes after about one per-node timeout — also on clients without
// ContextTimeoutEnabled, which do not end a request at its context's deadline (they
// wait up to their ReadTimeout, 5s): the per-node timeout's own timer counts the
// hung masters as failed.
func TestHungMajorityUnavailable(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			rs := privateMasters(t, masters, false)
			cs := make([]redis.UniversalClient, len(rs))
			for i, r := range rs {
				c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: ctxTimeouts})
				t.Cleanup(func() { c.Close() })
				cs[i] = c
			}
			l := redlock.New(cs)
			t.Cleanup(func() { l.Close() })
			warm(t, l)
			pause(t, rs[0], rs[1], rs[2])
			t0 := time.Now()
			_, err := l.Acquire(ctxFor(t, time.Minute), key(t))
			took := time.Since(t0)
			if !errors.Is(err, dlock.ErrUnavailable) {
				t.Fatalf("3 of 5 masters hung: want ErrUnavailable, got %v", err)
			}
			nt := redlock.NodeTimeout(dlock.DefaultTTL)
			if took < nt || took > unavailableBound {
				t.Errorf("3 of 5 masters hung: ErrUnavailable after %v, want after the per-node timeout %v and within %v", took, nt, unavailableBound)
			}
			t.Logf("ErrUnavailable after %v (per-node timeout %v)", took.Round(time.Millisecond), nt)
			resume(t, rs[0], rs[1], rs[2])
		})
	}
}

// warm makes one acquire+release on l so that its connections are open.
func warm(t testing.TB, l dlock.Locker) {
	t.Helper()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), key(t)+"/warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A grant does not wait for slow masters once a majority said yes: with 2 masters
// hung and a per-node timeout of 5s, TryAcquire returns long before 5s.
func TestGrantDoesNotWaitForSlowMasters(t *testing.T) {
	rs := privateMasters(t, masters, false)
	const nodeTimeout = 5 * time.Second
	l := newLocker(t, rs, redlock.WithNodeTimeout(nodeTimeout))
	warm(t, l)
	pause(t, rs[3], rs[4])
	t0 := time.Now()
	ls, err := l.TryAcquire(ctxFor(t, time.Minute), key(t))
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("2 of 5 masters hung: %v", err)
	}
	if took > nodeTimeout/5 {
		t.Errorf("2 of 5 masters hung: granted after %v, want well before the per-node timeout %v", took, nodeTimeout)
	}
	t.Logf("granted after %v with 2 masters hung (per-node timeout %v)", took, nodeTimeout)
	resume(t, rs[3], rs[4])
	if err := ls.Release(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

// A failed attempt leaves nothing behind: the masters that granted it are released
// before TryAcquire returns ErrNotAcquired.
func TestFailedAttemptReleasesItsGrants(t *testing.T) {
	rs := privateMasters(t, masters, false)
	k := key(t)
	for _, r := range rs[:3] { // another owner holds the lock on a majority
		if _, err := r.Do(ctxFor(t, 10*time.Second), "SET", k, "other", "PX", "60000"); err != nil {
			t.Fatal(err)
		}
	}
	l := newLocker(t, rs)
	for i := range 5 {
		if _, err := l.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("attempt %d: want ErrNotAcquired, got %v", i, err)
		}
		if n, values := holders(t, rs, k); n != 3 {
			t.Fatalf("attempt %d: after a failed attempt %d masters hold %q: %v (want only the 3 of the other owner)", i, n, k, values)
		}
	}
}

// The validity deadline is TTL − drift after the start of the attempt: with a
// drift allowance of half the TTL, the lease ends at half its TTL.
func TestValidityUsesDrift(t *testing.T) {
	rs := privateMasters(t, masters, false)
	const ttl = 1 * time.Second
	for _, c := range []struct {
		name  string
		opts  []redlock.Option
		valid time.Duration
	}{
		{"default", nil, ttl - (ttl/100 + 2*time.Millisecond)},
		{"half", []redlock.Option{redlock.WithDrift(0.5, 0)}, ttl / 2},
		{"fixed", []redlock.Option{redlock.WithDrift(0, 300*time.Millisecond)}, ttl - 300*time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLocker(t, rs, c.opts...)
			t0 := time.Now()
			ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), key(t), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			<-ls.Done()
			lasted := time.Since(t0)
			if !errors.Is(ls.Err(), dlock.ErrExpired) {
				t.Fatalf("Err: %v, want ErrExpired", ls.Err())
			}
			// Done closes at the deadline measured from before the request; the timer
			// may fire a little late, never early.
			if lasted > c.valid+100*time.Millisecond || lasted < c.valid-50*time.Millisecond {
				t.Errorf("lease with ttl %v lasted %v, want about %v", ttl, lasted, c.valid)
			}
			_ = ls.Release(ctxFor(t, 10*time.Second))
		})
	}
}

// Refresh needs a majority: with 3 of 5 masters down it fails with ErrUnavailable
// and the lease keeps its old deadline.
func TestRefreshNeedsMajority(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l := newLocker(t, rs)
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), key(t), dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	kill(t, rs[0], rs[1])
	if err := ls.Refresh(ctxFor(t, 10*time.Second), 5*time.Second); err != nil {
		t.Fatalf("Refresh with 3 of 5 masters: %v", err)
	}
	kill(t, rs[2])
	err = ls.Refresh(ctxFor(t, 10*time.Second), 5*time.Second)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Refresh with 2 of 5 masters: want ErrUnavailable, got %v", err)
	}
	if !live(ls) {
		t.Fatalf("a refresh that failed for want of masters ended the lease: %v", ls.Err())
	}
}

// lockOnThree grants a lease held on masters 0, 1 and 2 only, as in the Redlock
// article's crash scenario: masters 3 and 4 refuse it (another owner's key, which then
// expires). The other owner's key outlives every request of the acquire (at most the
// per-node timeout, 250ms, once warmed), so a late request is refused too; a key
// deleted at once could let a request still on its way take master 3 or 4.
func lockOnThree(t *testing.T, rs []*servers.Redis, a dlock.Locker, ttl time.Duration) (dlock.Lease, string) {
	t.Helper()
	warm(t, a) // no first-contact allowance: a request lasts at most the per-node timeout
	k := key(t)
	for _, r := range rs[3:] {
		if _, err := r.Do(ctxFor(t, 10*time.Second), "SET", k, "other", "PX", "600"); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, values := holders(t, rs, k)
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first lease is on %d masters (%v), want 3", n, values)
		}
		time.Sleep(50 * time.Millisecond) // the other owner's key expires by the server's clock
	}
	return la, k
}

// The declared weakness: a master that restarts without persistence while a lock is
// held forgets it, and a second client gets a majority while the first lease is live.
func TestRestartWithoutPersistenceLetsASecondClientIn(t *testing.T) {
	rs := privateMasters(t, masters, false)
	a, b := newLocker(t, rs), newLocker(t, rs)
	la, k := lockOnThree(t, rs, a, 30*time.Second)
	kill(t, rs[2])
	restartEmpty(t, rs[2])
	lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("weakness did not reproduce: after master 3 restarted empty, the second client was refused: %v", err)
	}
	if !live(la) {
		t.Fatalf("the first lease ended (%v) before the second grant: no overlap shown", la.Err())
	}
	t.Logf("weakness reproduced: two live leases on %q (the first on masters 1-3, the second on 3-5)", k)
	_ = lb.Release(ctxFor(t, 10*time.Second))
	_ = la.Release(ctxFor(t, 10*time.Second))
}

// The same crash, but the master stays down for a TTL before it rejoins (the
// article's rule): no second client is granted while the first lease is live.
func TestDelayedRestartKeepsExclusion(t *testing.T) {
	rs := privateMasters(t, masters, false)
	a, b := newLocker(t, rs), newLocker(t, rs)
	const ttl = 2 * time.Second
	warm(t, b)
	la, k := lockOnThree(t, rs, a, ttl)
	kill(t, rs[2])
	crashed := time.Now()
	tries := 0
	for live(la) {
		tries++
		if lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); err == nil {
			_ = lb.Release(ctxFor(t, 10*time.Second))
			t.Fatalf("try %d: granted while master 3 was down and the first lease live", tries)
		} else if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("try %d: %v", tries, err)
		}
		time.Sleep(50 * time.Millisecond) // polling for a grant is the subject here
	}
	time.Sleep(time.Until(crashed.Add(ttl))) // the rule: stay down for a TTL
	restartEmpty(t, rs[2])
	lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("after the delayed restart and the first lease's end: %v", err)
	}
	t.Logf("%d tries refused while the first lease was live; granted after the delayed restart", tries)
	_ = lb.Release(ctxFor(t, 10*time.Second))
}

func TestNodeTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 50 * time.Millisecond,
		10 * time.Second:       100 * time.Millisecond,
		20 * time.Second:       200 * time.Millisecond,
		time.Hour:              250 * time.Millisecond,
	} {
		if got := redlock.NodeTimeout(ttl); got != want {
			t.Errorf("NodeTimeout(%v) = %v, want %v", ttl, got, want)
		}
	}
}

// Kleppmann's clock argument, reproduced: when the wall clocks of a majority of
// masters jump forward, they expire the key early and a second client is granted a
// majority while the first lease is live. (One jumping master is harmless: fault
// scenario ClockJump in TestFaults.)
func TestClockJumpOnMajorityLetsASecondClientIn(t *testing.T) {
	var rs []*servers.Redis
	for range 3 {
		rs = append(rs, servertest.NewRedis(t, servers.RedisOptions{FakeTimeOffset: "+0"}))
	}
	rs = append(rs, servertest.RedisMasters(t, 2)...)
	a, b := newLocker(t, rs), newLocker(t, rs)
	k := key(t)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("before the jump: want ErrNotAcquired, got %v", err)
	}
	for _, r := range rs[:3] {
		if err := r.ShiftClock(ctxFor(t, time.Minute), "+60s"); err != nil {
			t.Fatal(err)
		}
	}
	lb, err := b.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("weakness did not reproduce: after 3 masters' clocks jumped 60s, the second client was refused: %v", err)
	}
	if !live(la) {
		t.Fatalf("the first lease ended (%v) before the second grant", la.Err())
	}
	t.Logf("two live leases after a clock jump on 3 of 5 masters")
	_ = lb.Release(ctxFor(t, 10*time.Second))
	_ = la.Release(ctxFor(t, 10*time.Second))
}

// A waiter is woken by the release (pub/sub on the masters), not by its backoff: with
// a 10s retry delay and a 30s lease, it is granted right after the release.
func TestReleaseWakesWaiter(t *testing.T) {
	rs := privateMasters(t, masters, false)
	a, b := newLocker(t, rs), newLocker(t, rs)
	k := key(t)
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ls  dlock.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		ls, err := b.Acquire(ctxFor(t, 20*time.Second), k, dlock.WithRetry(dlock.ConstantBackoff(10*time.Second)))
		got <- result{ls, err, time.Now()}
	}()
	// Wait until b is waiting: its attempts are refused and it has subscribed.
	time.Sleep(500 * time.Millisecond) // b's waiting state has no signal; only its timing is tested
	released := time.Now()
	if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if late := r.at.Sub(released); late > 2*time.Second {
		t.Errorf("the waiter was granted %v after the release (its retry delay is 10s): not woken", late)
	} else {
		t.Logf("granted %v after the release", late.Round(time.Millisecond))
	}
	_ = r.ls.Release(ctxFor(t, 10*time.Second))
}

func TestOpenRejects(t *testing.T) {
	for _, u := range []string{
		"redlock://",
		"redlock://127.0.0.1:1,127.0.0.1:1",
		"redlock://127.0.0.1",
		"redlock://127.0.0.1:1?db=2",
		"redlock://127.0.0.1:1?node_timeout=fast",
		"redlock://127.0.0.1:1?node_timeout=-1s",
		"redlock://127.0.0.1:1?drift_factor=0.01",
		"redlock://127.0.0.1:1?drift_factor=2&drift_fixed=2ms",
		"redlock://127.0.0.1:1?drift_factor=0.01&drift_fixed=soon",
		"redlock://127.0.0.1:1/x",
	} {
		if l, err := dlock.Open(ctxFor(t, 10*time.Second), u); !errors.Is(err, dlock.ErrInvalidURL) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", u, err)
		}
	}
}

func TestOpen(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l, err := dlock.Open(ctxFor(t, 10*time.Second), url(rs)+"?node_timeout=200ms&drift_factor=0.5&drift_fixed=1ms")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const ttl = 400 * time.Millisecond
	t0 := time.Now()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), key(t), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := holders(t, rs, key(t)); n < 3 {
		t.Fatalf("granted, but only %d masters hold the key", n)
	}
	<-ls.Done()
	// drift_factor=0.5: the validity is half the TTL.
	if lasted := time.Since(t0); lasted > ttl*3/4 {
		t.Errorf("with drift_factor=0.5 a %v lease lasted %v, want about %v", ttl, lasted, ttl/2)
	}

	// A majority down: Open fails, naming the masters.
	kill(t, rs[0], rs[1], rs[2])
	_, err = dlock.Open(ctxFor(t, 30*time.Second), url(rs))
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), rs[0].Addr()) {
		t.Fatalf("Open with 3 of 5 masters down: want ErrUnavailable naming %s, got %v", rs[0].Addr(), err)
	}
}

// setOn sets key to value (for 60s) on the given masters, as other contenders' grants.
func setOn(t testing.TB, rs []*servers.Redis, key, value string, on ...int) {
	t.Helper()
	for _, i := range on {
		if _, err := rs[i].Do(ctxFor(t, 10*time.Second), "SET", key, value, "PX", "60000"); err != nil {
			t.Fatal(err)
		}
	}
}

// others returns the masters other than those in not, in order.
func others(n int, not ...int) []int {
	var out []int
	for i := range n {
		if !slices.Contains(not, i) {
			out = append(out, i)
		}
	}
	return out
}

// A split vote is broken by the key's gate master: the contender that holds the gate
// (with one more master) while two other contenders hold the rest (two and one),
// none with a majority, keeps what it has and takes the masters the others give
// back; a contender that does not hold the gate gives its grants back at once and
// fails; and while another value holds a majority, the gate holder fails at once too.
func TestSplitVoteBrokenByGate(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l := newLocker(t, rs)
	warm(t, l)

	t.Run("gate holder claims", func(t *testing.T) {
		k := key(t)
		g := redlock.GateIndex(k, masters)
		rest := others(masters, g)
		setOn(t, rs, k, "x", rest[0], rest[1])
		setOn(t, rs, k, "y", rest[2])
		const withdrawAfter = 50 * time.Millisecond
		withdrawn := make(chan struct{})
		go func() { // the other contenders lose and give their grants back
			defer close(withdrawn)
			time.Sleep(withdrawAfter)
			for _, i := range rest[:3] {
				if _, err := rs[i].Do(ctxFor(t, 10*time.Second), "DEL", k); err != nil {
					t.Error(err)
				}
			}
		}()
		t0 := time.Now()
		ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
		took := time.Since(t0)
		<-withdrawn
		if err != nil {
			t.Fatalf("holding the gate and one more master in a split vote: %v, want the lock once the others withdraw", err)
		}
		if took < withdrawAfter {
			t.Errorf("granted after %v, before the other contenders withdrew (%v)", took, withdrawAfter)
		}
		if n, vals := holders(t, rs, k); n < masters/2+1 {
			t.Errorf("the claimed lock is on %d masters (%v), want a majority", n, vals)
		}
		if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("claim given up with its ctx", func(t *testing.T) {
		// The gate holder claims, nobody withdraws, and the Acquire's ctx ends
		// during the claim: what it holds is given back all the same.
		l, idle := redlock.NewWithIdle(clients(t, rs))
		t.Cleanup(func() { l.Close() })
		warm(t, l)
		k := key(t)
		g := redlock.GateIndex(k, masters)
		rest := others(masters, g)
		setOn(t, rs, k, "x", rest[0], rest[1])
		setOn(t, rs, k, "y", rest[2])
		if _, err := l.TryAcquire(ctxFor(t, 100*time.Millisecond), k); err == nil {
			t.Fatal("granted a split vote that nobody withdrew from")
		}
		idle()
		if n, vals := holders(t, rs, k); n != 3 {
			t.Errorf("after the claim gave up %d masters hold %q: %v (want only the other contenders' 3)", n, k, vals)
		}
	})

	t.Run("others give back", func(t *testing.T) {
		k := key(t)
		g := redlock.GateIndex(k, masters)
		rest := others(masters, g)
		setOn(t, rs, k, "x", g, rest[0])
		setOn(t, rs, k, "y", rest[1])
		t0 := time.Now()
		if _, err := l.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a split vote without the gate: %v, want ErrNotAcquired", err)
		}
		t.Logf("failed after %v", time.Since(t0))
		if n, vals := holders(t, rs, k); n != 3 {
			t.Errorf("after the failed attempt %d masters hold %q: %v (want only the other contenders' 3)", n, k, vals)
		}
	})

	t.Run("majority elsewhere", func(t *testing.T) {
		k := key(t)
		g := redlock.GateIndex(k, masters)
		rest := others(masters, g)
		setOn(t, rs, k, "x", rest[0], rest[1], rest[2])
		t0 := time.Now()
		if _, err := l.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("another value on a majority: %v, want ErrNotAcquired", err)
		}
		if took := time.Since(t0); took > 2*time.Second {
			t.Errorf("with another value on a majority the gate holder failed only after %v: it must not claim", took)
		}
		if n, vals := holders(t, rs, k); n != 3 {
			t.Errorf("after the failed attempt %d masters hold %q: %v (want only the holder's 3)", n, k, vals)
		}
	})
}

// proxied starts n masters for t alone, each behind a proxy, and returns the proxies
// and a redlock:// URL through them (query appended).
func proxied(t *testing.T, n int, query string) (servers.Proxies, string) {
	var addrs []string
	for _, r := range servertest.RedisMasters(t, n) {
		addrs = append(addrs, r.Addr())
	}
	ps, hosts := servertest.Proxies(t, addrs)
	return ps, "redlock://" + strings.Join(hosts, ",") + query
}

// TestReleaseReplyLost: every master's reply to a release is lost with its
// connection after the release ran; go-redis retries on each, and the retries must
// not count as "not ours any more": Release succeeds and the lease ends released.
func TestReleaseReplyLost(t *testing.T) {
	ps, u := proxied(t, 3, "")
	l := servertest.Open(t, u)
	ctx := ctxFor(t, time.Minute)
	warm(t, l) // loads the scripts: the lost reply is the release's own, not a NOSCRIPT
	k := key(t)
	ls, err := l.TryAcquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.LoseReply(k)
	}
	defer ps.Restore()
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release whose replies were lost (the scripts ran): %v; want success", err)
	}
	if !errors.Is(ls.Err(), dlock.ErrReleased) {
		t.Fatalf("the lease ended with %v, want ErrReleased", ls.Err())
	}
}

// TestAcquireAllGiveBackWaitsForRefresh: a set of two keys with auto-renewal; a
// Refresh refreshes the first key (which writes the lock's TTL and validity) while
// the second key's requests are held by the proxies, past the lease's deadline.
// The lease then ends (ErrLost) and gives the set back — and the give-back must wait
// for the Refresh still using the locks (the lease's operation slot), not run beside
// it: the race detector saw the give-back's read of the first lock's TTL race with
// the Refresh's write.
func TestAcquireAllGiveBackWaitsForRefresh(t *testing.T) {
	ps, u := proxied(t, 3, "?node_timeout=30s")
	l := servertest.Open(t, u)
	ctx := ctxFor(t, time.Minute)
	a, b := key(t)+"/a", key(t)+"/b"
	const ttl = 2 * time.Second
	set, err := dlock.TryAcquireAll(ctx, l, []string{a, b}, dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		p.Hold(b) // b's requests stall; a's go through
	}
	defer ps.Restore()
	refreshed := make(chan error, 1)
	go func() { refreshed <- set.Refresh(ctx, ttl) }()
	<-set.Done() // the deadline passes while b's refresh is held
	if !errors.Is(set.Err(), dlock.ErrLost) {
		t.Fatalf("the set lease ended with %v, want ErrLost", set.Err())
	}
	if err := <-refreshed; err == nil {
		t.Fatal("Refresh across the deadline succeeded")
	}
	ps.Restore()
	// The give-back frees a (b is freed too, or ends at its TTL).
	probe := servertest.Open(t, u)
	if ls, err := probe.Acquire(ctxFor(t, 3*ttl), a, dlock.WithTTL(ttl)); err != nil {
		t.Fatalf("the lost set's first key is still held: %v", err)
	} else {
		_ = ls.Release(ctx)
	}
}

// A release reaches every master, also one whose vote was still in flight when the
// lease was granted and released: the release waits for the vote (not given up once
// a majority has released), so the vote cannot land after it and leave the key
// there until its TTL. One request in flight per master; master 4 is paused while
// the lease is taken and given back, so its vote holds the master's only slot and
// its release queues behind it (the vote must have reached master 4: its SET is
// counted); once it resumes, and Close has waited for what is in flight, no master
// holds the key.
func TestReleaseReachesMasterWhoseVoteWasInFlight(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l, idle := redlock.NewWithIdle(clients(t, rs), redlock.WithMaxInFlight(1), redlock.WithNodeTimeout(time.Minute))
	t.Cleanup(func() { l.Close() })
	warm(t, l)
	idle() // nothing of warm's holds master 4's slot
	k := key(t)
	resetStats(t, rs[4])
	pause(t, rs[4])
	ls, err := l.TryAcquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("1 of 5 masters hung: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("release with 1 of 5 masters hung: %v", err)
	}
	cancel() // as a caller's deferred cancel would: the release to master 4 must not be cut
	resume(t, rs[4])
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := commandCalls(t, rs[4], "set"); n < 1 { // (the release's tombstone is a SET too)
		t.Fatalf("master 4 ran no SET: the vote never reached it, and the test exercised nothing")
	}
	if n, values := holders(t, rs, k); n != 0 {
		t.Errorf("after the release and Close %d masters hold %q: %v (the vote in flight landed after its release was given up)", n, k, values)
	}
}

// A release does not wait for a slot longer than the key can live: with master 4
// hung, its release waits behind the vote in flight there only until the lease's
// TTL has passed, and is then given up (the vote's key has expired by then), so
// releases do not pile up behind a hung master. And a Release whose ctx has ended
// before it began sends nothing: it did not say it succeeded, so it must not free
// the lock behind the caller's back.
func TestReleaseWaitIsBounded(t *testing.T) {
	rs := privateMasters(t, masters, false)
	l, idle := redlock.NewWithIdle(clients(t, rs), redlock.WithMaxInFlight(1), redlock.WithNodeTimeout(time.Minute))
	t.Cleanup(func() { l.Close() })
	warm(t, l)
	idle()
	k := key(t)

	ls, err := l.TryAcquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 { // (the requests race the round's own look at ctx)
		if err := ls.Release(done); err == nil {
			t.Fatal("Release with an ended ctx succeeded")
		}
		idle()
		if n, values := holders(t, rs, k); n != masters {
			t.Fatalf("after a Release whose ctx had ended %d masters hold %q (%v), want all %d", n, k, values, masters)
		}
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	idle()

	const ttl = 300 * time.Millisecond
	resetStats(t, rs[4])
	pause(t, rs[4])
	ls, err = l.TryAcquire(ctxFor(t, time.Minute), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("1 of 5 masters hung: %v", err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // the fault's length: the master stays hung past the release's wait
	resume(t, rs[4])
	idle()
	if n := commandCalls(t, rs[4], "set"); n < 1 {
		t.Fatalf("master 4 ran no SET: the vote never reached it, and the test exercised nothing")
	}
	if n := commandCalls(t, rs[4], "evalsha"); n != 0 {
		t.Errorf("master 4 got %d scripts, want none: a release waited for its slot past the lease's TTL", n)
	}
}

// resetStats zeroes r's command statistics (commandCalls).
func resetStats(t testing.TB, r *servers.Redis) {
	t.Helper()
	if err := clients(t, []*servers.Redis{r})[0].ConfigResetStat(ctxFor(t, 10*time.Second)).Err(); err != nil {
		t.Fatal(err)
	}
}

// commandCalls is how many times r ran cmd since its statistics were reset.
func commandCalls(t testing.TB, r *servers.Redis, cmd string) int {
	t.Helper()
	info, err := clients(t, []*servers.Redis{r})[0].Info(ctxFor(t, 10*time.Second), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// A free lock's vote is SET NX PX; refused, vote.lua tells who holds it. A free lock
// is granted on every master, a held one refused with ErrNotAcquired and left to its
// holder, and a key of another type is an error, not a grant.
func TestVote(t *testing.T) {
	rs := privateMasters(t, masters, false)
	a, b := newLocker(t, rs), newLocker(t, rs)
	k := key(t)
	ls, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if n, values := holders(t, rs, k); n != masters {
		t.Fatalf("granted: %d masters hold %q (%v), want all %d", n, k, values, masters)
	}
	if _, err := b.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("held: want ErrNotAcquired, got %v", err)
	}
	if n, _ := holders(t, rs, k); n != masters {
		t.Fatalf("after a refusal %d masters hold %q, want all %d (the holder's)", n, k, masters)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	wrong := k + "/list"
	for _, c := range clients(t, rs) {
		if err := c.RPush(ctxFor(t, 10*time.Second), wrong, "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, err = a.TryAcquire(ctxFor(t, 10*time.Second), wrong)
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a key of another type: want ErrUnavailable with WRONGTYPE, got %v", err)
	}
	for _, c := range clients(t, rs) {
		if n, err := c.LLen(ctxFor(t, 10*time.Second), wrong).Result(); err != nil || n != 1 {
			t.Fatalf("%v: the list holds %d elements (%v), want 1, untouched", c, n, err)
		}
	}
}
