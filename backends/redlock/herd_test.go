package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/internal/servers"
)

// TestReleaseWakesOne: a release wakes one waiter, not every waiter of the key, so a
// hand-off costs the masters the same few requests however many wait. 100 waiters,
// each a Locker of its own over the same 5 masters, queue one after the other behind
// a holder; each
// releases as soon as it is granted. Over the 100 hand-offs the masters together
// run at most 3 scripts per master per hand-off (the release, the woken waiter's
// vote, and slack for a split vote's tie-break). Woken all at once, every waiter
// would vote at every release: about 50 votes on each master per hand-off.
func TestReleaseWakesOne(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	const n = 100
	lh := holdEverywhere(t, patientLocker(t, rs), admins, k)
	done := make(chan error, n)
	for i := range n {
		// One at a time: a hundred first rounds at once (each dials five masters)
		// can outlast the first contact's timeout on a loaded machine.
		l := patientLocker(t, rs)
		go func() {
			ls, err := l.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
			if err == nil {
				err = ls.Release(context.Background())
			}
			done <- err
		}()
		waitWaiters(t, admins, k, i+1)
	}
	for _, c := range admins {
		if err := c.ConfigResetStat(ctxFor(t, 10*time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	runs := 0
	for _, r := range rs {
		runs += scriptRuns(t, r.Addr())
	}
	per := float64(runs) / n / masters
	t.Logf("%d script runs on %d masters for %d hand-offs (%.2f per master each)", runs, masters, n, per)
	if per > 3 {
		t.Errorf("%.1f script runs per master per hand-off, want at most 3: a release woke more than one waiter", per)
	}
}

// patientLocker is newLocker with a per-node timeout of a minute. These tests look
// for a grant or a queue place on every master; a request cut by the default timeout
// (250ms, 500ms for a Locker's first requests, both reached on a loaded 2-core
// machine under -race) never reaches its master, which is correct Redlock (the round
// was decided by the others) but leaves nothing there to look at.
func patientLocker(t testing.TB, rs []*servers.Redis) dlock.Locker {
	return newLocker(t, rs, redlock.WithNodeTimeout(time.Minute))
}

// holdEverywhere takes k on l (TTL a minute) and waits until every master holds it:
// TryAcquire returns once a majority granted it, the other masters' grants land
// after. A waiter then meets the holder on every master, and so queues on every
// master (on a master still free it would be granted there, and withdraw it).
func holdEverywhere(t testing.TB, l dlock.Locker, cs []redis.UniversalClient, k string) dlock.Lease {
	t.Helper()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	untilEveryMaster(t, cs, func(c redis.UniversalClient) (bool, string) {
		n, err := c.Exists(ctxFor(t, 10*time.Second), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1, "the holder's grant has not landed"
	})
	return ls
}

// waitWaiters waits until n Lockers wait for k on every master: in its queue of
// waiters, or (a waiter that looks at every release) listening on its release
// channel.
func waitWaiters(t testing.TB, cs []redis.UniversalClient, k string, n int) {
	t.Helper()
	untilEveryMaster(t, cs, func(c redis.UniversalClient) (bool, string) {
		queued, err := c.ZCard(ctxFor(t, 10*time.Second), redlock.QueueKey(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		subs, err := c.PubSubNumSub(ctxFor(t, 10*time.Second), redisops.Channel(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		got := max(int(queued), int(subs[redisops.Channel(k)]))
		return got >= n, fmt.Sprintf("%d waiters, want %d", got, n)
	})
}

// untilEveryMaster polls each master's state until ok says it is there, and fails
// the test with ok's description after 30s. There is no signal for a master's state.
func untilEveryMaster(t testing.TB, cs []redis.UniversalClient, ok func(redis.UniversalClient) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range cs {
		for {
			done, what := ok(c)
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: after 30s: %s", c, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
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

// TestWaiterThatLeavesPassesItsTurn: a waiter whose Acquire is cancelled leaves the
// queue on every master, so the next release wakes the waiter behind it rather than
// the one that left. The TTLs are a minute, so a waiter that is not told looks
// again only after 20s (a third of its TTL); the test wants the grant within 5s.
func TestWaiterThatLeavesPassesItsTurn(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	first, second := patientLocker(t, rs), patientLocker(t, rs)
	lh := holdEverywhere(t, patientLocker(t, rs), admins, k)
	ctx, cancel := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Acquire(ctx, k, dlock.WithTTL(time.Minute))
		firstDone <- err
	}()
	waitWaiters(t, admins, k, 1)
	got := acquireRelease(t, second, k)
	waitWaiters(t, admins, k, 2)
	cancel()
	if err := <-firstDone; err == nil {
		t.Fatal("the cancelled Acquire was granted")
	}
	for _, c := range admins {
		if n, err := c.ZCard(ctxFor(t, 10*time.Second), redlock.QueueKey(k)).Result(); err != nil || n != 1 {
			t.Fatalf("after the first waiter left, a master's queue holds %d waiters (%v), want 1", n, err)
		}
	}
	released := time.Now()
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	grantedWithin(t, got, released, 5*time.Second, "the second waiter was granted %v after the release", "the second waiter was not granted within 5s of the release: the release woke the waiter that had left")
}

// TestWaitLongerThanTTL: a waiter that waits longer than its lease's TTL is granted a
// lease that counts its TTL from the round that granted it, not from the start of
// its wait (which would be over before the grant).
func TestWaitLongerThanTTL(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	waiter := patientLocker(t, rs)
	lh := holdEverywhere(t, patientLocker(t, rs), admins, k)
	const ttl = 200 * time.Millisecond
	type result struct {
		ls  dlock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := waiter.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(ttl))
		got <- result{ls, err}
	}()
	waitWaiters(t, admins, k, 1)
	time.Sleep(3 * ttl) // the wait must outlast the TTL: only its length matters here
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("a wait of %v with a TTL of %v: %v", 3*ttl, ttl, r.err)
	}
	if err := r.ls.Release(ctxFor(t, 10*time.Second)); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
}

// TestReleasePassesOverWaitersNobodyHears: a place in a master's queue whose waiter
// does not listen there — its wait ended with a leave that never reached this
// master — is dropped by the release that finds it first, and the next waiter is
// told. The stale place is written by hand on every master, first in line and with
// a deadline an hour away; the live waiter behind it must be granted within 5s of
// the release (its TTL is a minute: untold, it looks again after 20s).
func TestReleasePassesOverWaitersNobodyHears(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	waiter := patientLocker(t, rs)
	lh := holdEverywhere(t, patientLocker(t, rs), admins, k)
	got := acquireRelease(t, waiter, k)
	waitWaiters(t, admins, k, 1)
	for _, c := range admins {
		now, err := c.Time(ctxFor(t, 10*time.Second)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctxFor(t, 10*time.Second), redlock.QueueKey(k), redis.Z{Score: 1, Member: "gone"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctxFor(t, 10*time.Second), redlock.DeadlineKey(k), redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: "gone"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	released := time.Now()
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	grantedWithin(t, got, released, 5*time.Second, "the waiter behind the stale place was granted %v after the release", "the waiter was not granted within 5s of the release: the release told the stale place only")
	// The release on the masters beyond the majority runs after Release returned:
	// every master drops the stale place once the holder's release reaches it.
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range admins {
		for {
			n, err := c.ZScore(ctxFor(t, 10*time.Second), redlock.QueueKey(k), "gone").Result()
			if err == redis.Nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: the stale place is still queued 10s after the release (score %v, %v)", c, n, err)
			}
			time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
		}
	}
}

// TestSplitWithoutHolderLooksAgainSoon: a waiter that loses a round in which no
// value held a majority — the lock split between contenders, nobody's to release —
// does not wait to be told, since nobody will tell it: it looks again after the
// retry strategy's short delays. Three masters hold three different values of
// other programs, without expiry; then a plain DEL (which announces nothing) frees
// them. The waiter (TTL a minute: untold, it would look again after 20s) must be
// granted within 5s.
func TestSplitWithoutHolderLooksAgainSoon(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	for i, c := range admins[:3] {
		if err := c.Set(ctxFor(t, 10*time.Second), k, "other"+strconv.Itoa(i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waiter := patientLocker(t, rs)
	got := acquireRelease(t, waiter, k)
	waitWaiters(t, admins[:3], k, 1)
	freed := time.Now()
	for _, c := range admins[:3] {
		if err := c.Del(ctxFor(t, 10*time.Second), k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	grantedWithin(t, got, freed, 5*time.Second, "granted %v after the keys were deleted", "the waiter was not granted within 5s of the lock coming free: it waited to be told")
}

// grantedWithin waits for the waiter's result on got: it fails t unless the waiter
// was granted (and released) within d of since. granted is logged with the time
// taken (one %v); late is the failure.
func grantedWithin(t *testing.T, got <-chan error, since time.Time, d time.Duration, granted, late string) {
	t.Helper()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf(granted, time.Since(since).Round(time.Millisecond))
	case <-time.After(d):
		t.Fatal(late)
	}
}

// acquireRelease starts an Acquire of k on l (TTL a minute) that releases what it is
// granted; the returned channel gets its outcome.
func acquireRelease(t *testing.T, l dlock.Locker, k string) <-chan error {
	got := make(chan error, 1)
	go func() {
		ls, err := l.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(time.Minute))
		if err == nil {
			err = ls.Release(context.Background())
		}
		got <- err
	}()
	return got
}

// TestUncontendedAcquireDoesNotQueue: an Acquire of a free lock is TryAcquire's
// round — SET NX PX — with nothing of the queue (no place, no wait.lua), so it costs
// what TryAcquire costs. Every master logs every command (SLOWLOG with a threshold
// of 0); the test reads what the Acquire sent. A majority must have got the vote
// once, and no master more than once: the Acquire returns at the majority, its
// context ends then, and a master whose request had not gone out by then (a
// goroutine scheduled late on a loaded machine) is not sent it.
func TestUncontendedAcquireDoesNotQueue(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	l := patientLocker(t, rs)
	k := key(t)
	for _, c := range admins {
		if err := c.ConfigSet(ctxFor(t, 10*time.Second), "slowlog-log-slower-than", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.SlowLogReset(ctxFor(t, 10*time.Second)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := l.Acquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // waits for the requests beyond the majority
		t.Fatal(err)
	}
	voted := 0
	for _, c := range admins {
		log, err := c.SlowLogGet(ctxFor(t, 10*time.Second), 128).Result()
		if err != nil {
			t.Fatal(err)
		}
		votes := 0
		for _, e := range log {
			if len(e.Args) < 2 {
				continue
			}
			switch {
			case strings.EqualFold(e.Args[0], "set") && e.Args[1] == k:
				votes++ // SET NX PX: a free lock's vote as one command
			case !strings.EqualFold(e.Args[0], "evalsha"):
			case e.Args[1] == redlock.WaitHash:
				t.Errorf("%v: the uncontended Acquire sent wait.lua", c)
			case e.Args[1] == redlock.VoteHash:
				t.Errorf("%v: the uncontended Acquire sent vote.lua, want SET NX PX alone", c)
			}
		}
		if votes > 1 {
			t.Errorf("%v: the Acquire sent its vote %d times, want at most once", c, votes)
		}
		voted += votes
	}
	if quorum := masters/2 + 1; voted < quorum {
		t.Errorf("the vote reached %d masters, want at least a majority (%d)", voted, quorum)
	}
	for _, c := range admins {
		if n, err := c.Exists(ctxFor(t, 10*time.Second), redlock.QueueKey(k), redlock.DeadlineKey(k)).Result(); err != nil || n != 0 {
			t.Errorf("%v: %d queue keys after an uncontended Acquire (%v), want none", c, n, err)
		}
	}
}

// TestPassedOverWaiterIsServed: by default a caller that asks for a free lock takes
// it ahead of the waiter a release woke, but not twice in a row: the second release
// that wakes the same waiter reserves the lock for it, so the barging caller's next
// TryAcquire is refused. B holds k on every master and W waits behind it (queued and
// listening on every master). First in every master's queue is h, which listens
// but never votes (so that B deterministically wins the first race): B releases and
// at once asks again, twice. The first time B is granted, the second time it must be
// refused (it is granted without the reservation), and Describe must show the lock
// free (nobody holds it yet). Then h leaves the queue on every
// master, as a waiter whose Acquire ended does, which gives its reservation back and
// wakes W: W must be granted.
func TestPassedOverWaiterIsServed(t *testing.T) {
	rs := privateMasters(t, masters, false)
	admins := clients(t, rs)
	k := key(t)
	b, w := patientLocker(t, rs), patientLocker(t, rs)
	lh := holdEverywhere(t, b, admins, k)
	type outcome struct {
		ls  dlock.Lease
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		ls, err := w.Acquire(ctxFor(t, time.Minute), k, dlock.WithTTL(time.Minute))
		got <- outcome{ls, err}
	}()
	waitWaiters(t, admins, k, 1)
	untilEveryMaster(t, admins, func(c redis.UniversalClient) (bool, string) {
		chans, err := c.PubSubChannels(ctxFor(t, 10*time.Second), redisops.Channel(k)+"#*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(chans) == 1, fmt.Sprintf("%d turn channels, want the waiter's", len(chans))
	})
	for _, c := range admins {
		ctx := ctxFor(t, 10*time.Second)
		sub := c.Subscribe(ctx, redisops.TurnChannel(k, "h"))
		t.Cleanup(func() { sub.Close() })
		if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		now, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, redlock.QueueKey(k), redis.Z{Score: 1, Member: "h"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, redlock.DeadlineKey(k), redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: "h"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		next, err := b.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
		switch {
		case i == 0 && err != nil:
			t.Fatalf("the first release that woke h: %v, want B granted (h does not vote)", err)
		case i == 1 && err == nil:
			t.Fatal("B took the lock twice in a row ahead of the waiter both releases woke: no reservation")
		case i == 1 && !errors.Is(err, dlock.ErrNotAcquired):
			t.Fatalf("B asking after the second release: %v, want ErrNotAcquired", err)
		}
		lh = next
	}
	states, err := dlock.Describe(ctxFor(t, 10*time.Second), b, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if len(st.Holders) > 0 {
			t.Fatalf("a lock reserved for a waiter is described as held: %+v", st)
		}
	}
	for _, c := range admins {
		if _, err := redlock.Release(ctxFor(t, 10*time.Second), c, k, "", "h", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case o := <-got:
		if o.err != nil {
			t.Fatal(o.err)
		}
		if err := o.ls.Release(ctxFor(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted within 30s of the reserved waiter's leaving")
	}
}

// TestReservationForPassedOverWaiter: release.lua and wait.lua on one master, step
// by step. The first release that wakes the queue's head notes its name, and the
// head's refused votes keep the note as long as its place; a later release that
// wakes it (someone else took the lock in between) leaves the lock reserved for it,
// for the given time, instead of free — again after a reservation expired unused —
// and a vote of anyone else is refused, the waiter's own vote takes it and ends the
// note. A waiter that leaves with a reservation gives it back and the next waiter
// is woken, also when the release that takes the reservation back is a granted
// lease's, on a master where its grant did not land.
func TestReservationForPassedOverWaiter(t *testing.T) {
	rs := privateMasters(t, 1, false)
	c := clients(t, rs)[0]
	k := key(t)
	ctx := ctxFor(t, 30*time.Second)
	const reserve = 10 * time.Second // a reservation's time: the steps below take a fraction of it
	sub := c.Subscribe(ctx, redisops.TurnChannel(k, "h"), redisops.TurnChannel(k, "h2"), redisops.TurnChannel(k, "h3"))
	defer sub.Close()
	for range 3 {
		if _, err := sub.Receive(ctx); err != nil { // the subscriptions' confirmations
			t.Fatal(err)
		}
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"h", "h2", "h3"} {
		deadline := now.Add(time.Hour)
		if name == "h" {
			deadline = now.Add(15 * time.Second) // renewed by its vote below
		}
		if err := c.ZAdd(ctx, redlock.QueueKey(k), redis.Z{Score: float64(i + 1), Member: name}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, redlock.DeadlineKey(k), redis.Z{Score: float64(deadline.UnixMilli()), Member: name}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	told := func(name string) {
		t.Helper()
		m, err := sub.ReceiveMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Channel != redisops.TurnChannel(k, name) {
			t.Fatalf("woke %q, want %q", m.Channel, redisops.TurnChannel(k, name))
		}
	}
	get := func(key string) string {
		t.Helper()
		v, err := c.Get(ctx, key).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	take := func(value string) {
		t.Helper()
		if err := c.Set(ctx, k, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	release := func(value, waiter string) {
		t.Helper()
		if _, err := redlock.Release(ctx, c, k, value, waiter, reserve); err != nil {
			t.Fatal(err)
		}
	}
	vote := func(value, name string, want bool) {
		t.Helper()
		granted, err := redlock.WaitVote(ctx, c, k, value, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if granted != want {
			t.Fatalf("%s's vote with the lock holding %q: granted %v, want %v", name, get(k), granted, want)
		}
	}
	reservedFor := func(name, after string) {
		t.Helper()
		if v := get(k); v != redlock.ReservedPrefix+name {
			t.Fatalf("after %s the lock holds %q, want it reserved for %s", after, v, name)
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > reserve {
			t.Fatalf("the reservation lasts %v, want at most %v", ttl, reserve)
		}
	}
	free := func(after string) {
		t.Helper()
		if v := get(k); v != "" {
			t.Fatalf("after %s the lock holds %q, want it free", after, v)
		}
	}

	take("a")
	release("a", "")
	told("h")
	free("the first release that woke h")
	if v := get(redlock.WokenKey(k)); v != "h" {
		t.Fatalf("the woken waiter noted is %q, want h", v)
	}
	take("b") // b takes the lock ahead of h
	vote("x", "h", false)
	if ttl := c.PTTL(ctx, redlock.WokenKey(k)).Val(); ttl <= 15*time.Second {
		t.Fatalf("after h's refused vote (place TTL a minute) its note lasts %v, want it renewed past its old deadline (15s)", ttl)
	}
	release("b", "")
	told("h")
	reservedFor("h", "the second release that woke h")
	l := redlock.New([]redis.UniversalClient{c})
	defer l.Close()
	if _, err := l.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a lock reserved for a waiter: %v, want ErrNotAcquired", err)
	}

	if err := c.Del(ctx, k).Err(); err != nil { // as if the reservation expired unused
		t.Fatal(err)
	}
	take("c")
	release("c", "")
	told("h")
	reservedFor("h", "a release after h's reservation expired")

	release("", "h") // h gave up
	told("h2")
	free("the reserved waiter left")
	if n := c.ZCard(ctx, redlock.QueueKey(k)).Val(); n != 2 {
		t.Fatalf("%d waiters queued after h left, want 2", n)
	}

	take("d")
	release("d", "")
	told("h2")
	reservedFor("h2", "the second release that woke h2")
	release("zz", "h2") // h2's lease, granted by the other masters, released here
	told("h3")
	free("h2's lease's release")

	take("e")
	release("e", "")
	told("h3")
	reservedFor("h3", "the second release that woke h3")
	vote("y", "other", false)
	vote("f", "h3", true)
	if v := get(k); v != "f" {
		t.Fatalf("after h3's vote the lock holds %q, want h3's value", v)
	}
	if v := get(redlock.WokenKey(k)); v != "" {
		t.Fatalf("after h3 was granted the note names %q, want none", v)
	}
}
