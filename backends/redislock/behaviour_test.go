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
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/closetest"
	"github.com/dlock-go/dlock/internal/locktest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

func uniqueKey(name string) string { return fmt.Sprintf("test/%s/%d", name, time.Now().UnixNano()) }

// TestClusterKeyLayout checks the key layout against the cluster's own hashing
// (CLUSTER KEYSLOT) and takes a lock on every odd key on the cluster: the acquire
// script touches the lock and its fence counter, which Redis refuses (CROSSSLOT)
// unless they share a slot.
func TestClusterKeyLayout(t *testing.T) {
	h := clusterHarness(t)
	keys := append(conformance.ValidKeys(), "}", "}{", "a}b", "{}x", "{a}}", "{{a}", "a{b", "{}{a}", strings.Repeat("}", 255))
	ctx := ctxFor(t, time.Minute)
	l := h.NewLocker(t)
	defer l.Close()
	for _, k := range keys {
		want, err := h.admin.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.admin.ClusterKeySlot(ctx, redisops.FenceKey(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got != want || int64(redisops.Slot(k)) != want {
			t.Errorf("%q: CLUSTER KEYSLOT says lock slot %d, fence key slot %d; redisops.Slot says %d", k, want, got, redisops.Slot(k))
		}
		ls, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%q) on the cluster: %v", k, err)
			continue
		}
		if err := ls.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", k, err)
		}
	}
}

// TestPeerExclusion: a lock taken with plain SET key value NX PX (go-redis SetNX) and
// one taken by New on the same key name exclude each other, and neither's release
// frees the other's lock. The bsm/redislock library is checked the same way by the
// lab (lab/peers/bsmpeer TestExclusionWithRedislock).
func TestPeerExclusion(t *testing.T) {
	addr := sharedRedis(t).Addr()
	raw := client(t, addr)
	l := redislock.New(client(t, addr))
	defer l.Close()
	ctx := ctxFor(t, time.Minute)

	t.Run("plain SET NX PX holds", func(t *testing.T) {
		k := uniqueKey("peer-set")
		if ok, err := raw.SetNX(ctx, k, "peer", 30*time.Second).Result(); err != nil || !ok {
			t.Fatalf("SET NX PX: %v %v", ok, err)
		}
		if _, err := l.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a key a peer holds: want ErrNotAcquired, got %v", err)
		}
		raw.Del(ctx, k)
	})
	t.Run("dlock holds", func(t *testing.T) {
		k := uniqueKey("peer-dlock")
		ls, err := l.TryAcquire(ctx, k, dlock.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := raw.SetNX(ctx, k, "peer", 30*time.Second).Result(); err != nil || ok {
			t.Fatalf("SET NX PX on a key dlock holds: set=%v err=%v, want not set", ok, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if ok, err := raw.SetNX(ctx, k, "peer", 30*time.Second).Result(); err != nil || !ok {
			t.Fatalf("SET NX PX after dlock's release: set=%v err=%v", ok, err)
		}
		// A stale dlock lease cannot free the peer's lock (owner value check).
		if err := ls.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("second Release: want ErrNotHeld, got %v", err)
		}
		if v, err := raw.Get(ctx, k).Result(); err != nil || v != "peer" {
			t.Fatalf("the peer's lock after a stale dlock Release: %q, %v", v, err)
		}
		raw.Del(ctx, k)
	})
}

// never is a retry strategy that would wait a minute: a waiter using it gets the lock
// sooner only through a wake-up or the holder's remaining TTL.
var never = dlock.WithRetry(dlock.ConstantBackoff(time.Minute))

// TestReleaseWakesWaiter: a waiter is woken by the release's pub/sub message, not by
// polling: it holds a retry strategy that waits a minute and the holder's TTL is 30s.
func TestReleaseWakesWaiter(t *testing.T) {
	addr := sharedRedis(t).Addr()
	a, b := redislock.New(client(t, addr)), redislock.New(client(t, addr))
	defer a.Close()
	defer b.Close()
	k := uniqueKey("wake")
	la, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var releasedAt atomic.Int64
	go func() {
		lb, err := b.Acquire(ctxFor(t, 10*time.Second), k, never)
		if err == nil {
			t.Logf("granted %v after the release", time.Duration(time.Now().UnixNano()-releasedAt.Load()))
			err = lb.Release(context.Background())
		}
		got <- err
	}()
	waitSubscribed(t, addr, k)
	releasedAt.Store(time.Now().UnixNano())
	if err := la.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter was not woken by the release: %v", err)
	}
}

// waitSubscribed waits until some client listens on k's release channel.
func waitSubscribed(t testing.TB, addr, k string) {
	t.Helper()
	c := client(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.PubSubNumSub(ctxFor(t, 10*time.Second), redisops.Channel(k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[redisops.Channel(k)] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no one subscribed to %q", redisops.Channel(k))
		}
		time.Sleep(5 * time.Millisecond) // polling the server's state: there is no signal for it
	}
}

// TestExpiryBoundsWait: expiry publishes nothing, so a waiter never waits longer than
// the holder's remaining TTL (PTTL) before looking again.
func TestExpiryBoundsWait(t *testing.T) {
	addr := sharedRedis(t).Addr()
	a, b := redislock.New(client(t, addr)), redislock.New(client(t, addr))
	defer a.Close()
	defer b.Close()
	k := uniqueKey("expiry-wait")
	ttl := 300 * time.Millisecond
	t0 := time.Now()
	if _, err := a.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(ttl)); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctxFor(t, 10*time.Second), k, never)
	if err != nil {
		t.Fatalf("the waiter did not get an expired lock within 10s: %v", err)
	}
	took := time.Since(t0)
	_ = lb.Release(ctxFor(t, 10*time.Second))
	if took < ttl || took > ttl+2*time.Second {
		t.Fatalf("granted %v after a %v lock was taken; want soon after its TTL", took, ttl)
	}
	t.Logf("granted %v after a %v lock was taken", took.Round(time.Millisecond), ttl)
}

// loseAcquireReply is a go-redis hook that runs the acquire script on the server and
// then reports a timeout instead of its reply, as a connection that dies at that
// moment would.
type loseAcquireReply struct{}

func (loseAcquireReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (loseAcquireReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (loseAcquireReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isAcquire(cmd) {
			cmd.SetErr(context.DeadlineExceeded)
			return context.DeadlineExceeded
		}
		return err
	}
}

// isAcquire tells a run of an acquire script: acquire.lua (two keys) or fair.lua's
// try or wait (five keys, then the operation).
func isAcquire(cmd redis.Cmder) bool {
	a := cmd.Args()
	if !strings.HasPrefix(cmd.Name(), "eval") || len(a) < 3 {
		return false
	}
	switch fmt.Sprint(a[2]) {
	case "2":
		return true
	case "5":
		return len(a) > 8 && (a[8] == "try" || a[8] == "wait")
	}
	return false
}

// TestLostReplyLeavesNoLock: when the acquire's reply does not arrive (ctx ended,
// connection lost) the lock may have been set; TryLock removes it.
func TestLostReplyLeavesNoLock(t *testing.T) {
	addr := sharedRedis(t).Addr()
	c := client(t, addr)
	c.AddHook(loseAcquireReply{})
	l := redislock.New(c)
	defer l.Close()
	k := uniqueKey("lost-reply")
	if _, err := l.TryAcquire(ctxFor(t, 10*time.Second), k); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire with the reply lost: want DeadlineExceeded, got %v", err)
	}
	if n, err := client(t, addr).Exists(ctxFor(t, 10*time.Second), k).Result(); err != nil || n != 0 {
		t.Fatalf("the lock whose grant was lost is still set (EXISTS %d, %v)", n, err)
	}
}

// TestAutoRenewLostWhenUnreachable: an auto-renewed lease whose client cannot reach
// Redis ends with ErrLost by its validity deadline.
func TestAutoRenewLostWhenUnreachable(t *testing.T) {
	h := newFaultHarness(t, faultConfig{})
	l, link := h.NewPartitionedLocker(t)
	defer l.Close()
	ttl := 500 * time.Millisecond
	t0 := time.Now()
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), uniqueKey("renew-lost"), dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	link.Blackhole()
	defer link.Restore()
	select {
	case <-ls.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("an auto-renewed lease cut off from Redis did not end")
	}
	if took := time.Since(t0); !errors.Is(ls.Err(), dlock.ErrLost) || took > ttl+time.Second {
		t.Fatalf("cut-off auto-renewed lease (ttl %v): ended after %v with %v, want ErrLost by the deadline", ttl, took, ls.Err())
	}
}

// TestReplicaAck: WithReplicaAck refuses a grant that no replica acknowledged, and
// leaves nothing behind on the master.
func TestReplicaAck(t *testing.T) {
	h := newFaultHarness(t, faultConfig{replica: true, ack: true})
	l := h.NewLocker(t)
	defer l.Close()
	k := uniqueKey("ack")
	ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatalf("TryAcquire with a replica in sync: %v", err)
	}
	if err := ls.Refresh(ctxFor(t, 10*time.Second), 10*time.Second); err != nil {
		t.Fatalf("Refresh with a replica in sync: %v", err)
	}
	_ = ls.Release(ctxFor(t, 10*time.Second))

	h.PauseReplication(t)
	_, err = l.TryAcquire(ctxFor(t, 10*time.Second), k)
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("TryAcquire with replication stalled: want ErrUnavailable, got %v", err)
	}
	if n, err := client(t, h.master.Addr()).Exists(ctxFor(t, 10*time.Second), k).Result(); err != nil || n != 0 {
		t.Fatalf("an unacknowledged grant was left on the master (EXISTS %d, %v)", n, err)
	}
}

// TestAcquireIdempotent: the acquire script run again with the same owner value (a
// retry after a lost reply) returns the same grant; another value is refused.
func TestAcquireIdempotent(t *testing.T) {
	c := client(t, sharedRedis(t).Addr())
	ctx := ctxFor(t, 10*time.Second)
	k, v := uniqueKey("idempotent"), redisops.NewValue()
	tok1, _, ok1, err1 := redisops.Acquire(ctx, c, k, v, time.Minute)
	tok2, _, ok2, err2 := redisops.Acquire(ctx, c, k, v, time.Minute)
	_, rem, ok3, err3 := redisops.Acquire(ctx, c, k, redisops.NewValue(), time.Minute)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if !ok1 || !ok2 || tok1 != tok2 || ok3 || rem <= 0 || rem > time.Minute {
		t.Fatalf("acquire, same value again, other value: (%v %d) (%v %d) (%v remaining %v); want the same grant twice, then busy",
			ok1, tok1, ok2, tok2, ok3, rem)
	}
}

// TestFencingAcrossRestart: the fencing counter lives in Redis like the lock. A
// restart without persistence loses it, and tokens start again from 1 (a fenced
// resource then refuses every writer until the counter passes what it has seen);
// with appendfsync always it survives.
func TestFencingAcrossRestart(t *testing.T) {
	for _, aof := range []string{"", "always"} {
		t.Run("aof="+aof, func(t *testing.T) {
			h := newFaultHarness(t, faultConfig{aof: aof})
			l := h.NewLocker(t)
			defer l.Close()
			k := uniqueKey("fence-restart")
			var before uint64
			for range 3 {
				ls, err := l.TryAcquire(ctxFor(t, 10*time.Second), k)
				if err != nil {
					t.Fatal(err)
				}
				before = ls.Token()
				_ = ls.Release(ctxFor(t, 10*time.Second))
			}
			h.RestartServers(t)
			ls, err := l.Acquire(ctxFor(t, 20*time.Second), k)
			if err != nil {
				t.Fatal(err)
			}
			after := ls.Token()
			_ = ls.Release(ctxFor(t, 10*time.Second))
			if kept := after > before; kept != (aof != "") {
				t.Fatalf("token %d before the restart, %d after (persistence %q)", before, after, aof)
			}
			t.Logf("token %d before the restart, %d after (persistence %q)", before, after, aof)
		})
	}
}

// TestURL opens both schemes and rejects what they do not know.
func TestURL(t *testing.T) {
	addr := sharedRedis(t).Addr()
	ctx := ctxFor(t, 30*time.Second)
	for _, u := range []string{"redis://" + addr, "redis://" + addr + "/1", "redis://" + addr + "?wait_replicas=0",
		"redis+setnx://" + addr + "?variant=expire", "redis+setnx://" + addr + "?variant=setnx%2Bgetset"} {
		l, err := dlock.Open(ctx, u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if err := cycleOnce(ctx, l, uniqueKey("url")); err != nil {
			t.Errorf("%s: %v", u, err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("%s: Close: %v", u, err)
		}
	}
	for _, u := range []string{"redis://" + addr + "?pool=3", "redis://" + addr + "?wait_timeout=1s", "redis://" + addr + "?wait_replicas=x",
		"redis://" + addr + "/x", "redis://", "redis+setnx://" + addr, "redis+setnx://" + addr + "?variant=other",
		"redis://h1:1,h2:2/3"} {
		if _, err := dlock.Open(ctx, u); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%q): want ErrInvalidURL, got %v", u, err)
		}
	}
}

func cycleOnce(ctx context.Context, l dlock.Locker, k string) error {
	ls, err := l.TryAcquire(ctx, k)
	if err != nil {
		return err
	}
	return ls.Release(ctx)
}

// TestFairWaiterNeedsNoMessage: in the fair mode a waiter does not depend on the
// release message. The holder's lock is deleted without one (as by an operator's
// DEL; a lost message looks the same to the waiter), and the waiter still gets the
// lock at its next renewal, a third of its TTL later — not at the holder's TTL.
func TestFairWaiterNeedsNoMessage(t *testing.T) {
	addr := sharedRedis(t).Addr()
	admin := client(t, addr)
	holder := redislock.New(client(t, addr), redislock.WithFIFO(true))
	waiter := redislock.New(client(t, addr), redislock.WithFIFO(true))
	defer holder.Close()
	defer waiter.Close()
	k := uniqueKey("fair-no-message")
	if _, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	const waiterTTL = 900 * time.Millisecond // renews its place every 300ms
	got := make(chan error, 1)
	go func() {
		ls, err := waiter.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(waiterTTL))
		if err == nil {
			err = ls.Release(ctxFor(t, 10*time.Second))
		}
		got <- err
	}()
	// Wait until the waiter has renewed its place once after joining (its deadline
	// moved): it has subscribed and looked again, and now sleeps.
	dl := redislock.DeadlineKey(k)
	first := 0.0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // the queue is the store's: nothing signals a change
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not join the queue and renew its place within 10s")
		}
		scores, err := admin.ZRangeWithScores(ctxFor(t, 10*time.Second), dl, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(scores) != 1 {
			continue
		}
		if first == 0 {
			first = scores[0].Score
		} else if scores[0].Score != first {
			break
		}
	}
	deleted := time.Now()
	if err := admin.Del(ctxFor(t, 10*time.Second), k).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	took := time.Since(deleted)
	if took > 2*waiterTTL/3 {
		t.Errorf("granted %v after the lock was deleted without a message, want within a renewal (%v)", took, waiterTTL/3)
	}
	t.Logf("granted %v after the silent delete (renewal every %v)", took, waiterTTL/3)
}

// TestFairWaiterLeaseCountsFromGrant: a waiter of the fair mode that waited longer
// than its TTL gets a lease whose validity counts from the request that granted it,
// not from the start of its wait (which would leave none: the grant would be given
// back).
func TestFairWaiterLeaseCountsFromGrant(t *testing.T) {
	addr := sharedRedis(t).Addr()
	holder := redislock.New(client(t, addr), redislock.WithFIFO(true))
	waiter := redislock.New(client(t, addr), redislock.WithFIFO(true))
	defer holder.Close()
	defer waiter.Close()
	k := uniqueKey("fair-validity")
	const ttl = 500 * time.Millisecond
	la, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(3*ttl, func() { _ = la.Release(context.Background()) })
	t0 := time.Now()
	ls, err := waiter.Acquire(ctxFor(t, 30*time.Second), k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("a waiter granted %v into its wait (ttl %v): %v", time.Since(t0), ttl, err)
	}
	granted := time.Now()
	if d, _ := dlock.Deadline(ls); d.Sub(granted) < ttl/2 {
		t.Errorf("granted after waiting %v: the lease's deadline is %v after the grant, want about its ttl %v", granted.Sub(t0), d.Sub(granted), ttl)
	}
	if err := ls.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestTLSAndACLRefusals: the server of TestConformanceTLS refuses every client that
// lacks one of its requirements, each refusal is an error that shows no password,
// and skip-verify must be spelled out.
func TestTLSAndACLRefusals(t *testing.T) {
	r, pki, good := secureRedis(t)
	ctx := ctxFor(t, time.Minute)
	q := func(params ...string) string { return strings.Join(params, "&") }
	ca, cert, key := "tls_ca="+url.QueryEscape(pki.CAFile), "tls_cert="+url.QueryEscape(pki.ClientCert), "tls_key="+url.QueryEscape(pki.ClientKey)
	user := "locker:" + secretPassword + "@" + r.Addr()
	for _, c := range []struct{ name, url, want string }{
		{"plain text", "redis://" + user, ""},
		{"system roots", "rediss://" + user + "?" + q(cert, key), "certificate signed by unknown authority"},
		{"no client certificate", "rediss://" + user + "?" + q(ca, "tls_server_name=localhost"), "certificate required"},
		{"wrong server name", "rediss://" + user + "?" + q(ca, cert, key, "tls_server_name=db.example.com"), "not db.example.com"},
		{"wrong password", "rediss://locker:WRONG-" + secretPassword + "@" + r.Addr() + "?" + q(ca, cert, key), "WRONGPASS"},
		{"no password", "rediss://locker@" + r.Addr() + "?" + q(ca, cert, key), ""},
	} {
		l, err := dlock.Open(ctx, c.url)
		if err == nil {
			l.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		if errors.Is(err, dlock.ErrInvalidURL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want a connection error saying %q, got %v", c.name, c.want, err)
		}
		if strings.Contains(err.Error(), secretPassword) {
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
	}
	// Verification off, spelled out: the CA and server name are not needed. And the
	// SETNX variants take the same TLS parameters (as the administrator: the lock
	// user's ACL covers New's commands only).
	for _, u := range []string{"rediss://" + user + "?" + q("tls=skip-verify", cert, key),
		"redis+setnx://:adm1n-pw@" + r.Addr() + "?" + q("variant=getset", ca, cert, key)} {
		l, err := dlock.Open(ctx, u)
		if err != nil {
			t.Fatalf("Open(%s): %v", strings.ReplaceAll(u, secretPassword, "…"), err)
		}
		if err := cycleOnce(ctx, l, uniqueKey("tls")); err != nil {
			t.Error(err)
		}
		l.Close()
	}
	for _, u := range []string{good + "&tls=skip-verify", good + "&tls=false", "redis://" + r.Addr() + "?tls_ca=/nonexistent",
		"redis://" + r.Addr() + "?" + cert, "redis://" + r.Addr() + "?tls=yes", "redis://" + r.Addr() + "?tls_ca=" + url.QueryEscape(pki.ClientKey)} {
		if _, err := dlock.Open(ctx, u); !errors.Is(err, dlock.ErrInvalidURL) || strings.Contains(err.Error(), secretPassword) {
			t.Errorf("Open(%s): want ErrInvalidURL without the password, got %v", strings.ReplaceAll(u, secretPassword, "…"), err)
		}
	}
}

// TestClusterByURL: a URL with every node, or with one seed node and cluster=true,
// opens a Cluster client that reaches every master; the seed alone without
// cluster=true is a single-node client, which the other masters redirect (MOVED).
func TestClusterByURL(t *testing.T) {
	addrs := redisCluster(t).Addrs()
	ctx := ctxFor(t, time.Minute)
	// One key per master: Redis Cluster splits the 16384 slots evenly.
	var keys []string
	for _, slot := range []int{100, 6000, 12000} {
		keys = append(keys, "{"+redisops.SlotTag(slot)+"}cluster-url")
	}
	for _, u := range []string{"redis://" + strings.Join(addrs, ","), "redis://" + addrs[0] + "?cluster=true"} {
		l := servertest.Open(t, u)
		for _, k := range keys {
			if err := cycleOnce(ctx, l, k); err != nil {
				t.Errorf("%s: %q: %v", u, k, err)
			}
		}
	}
	single := servertest.Open(t, "redis://"+addrs[0])
	moved := 0
	for _, k := range keys {
		if err := cycleOnce(ctx, single, k); err != nil && strings.Contains(err.Error(), "MOVED") {
			moved++
		}
	}
	if moved != 2 {
		t.Errorf("a single-node client of one master: %d of 3 keys MOVED, want 2 (the other masters' slots)", moved)
	}
	for _, u := range []string{"redis://" + strings.Join(addrs, ",") + "?cluster=false", "redis://" + addrs[0] + "?cluster=true&sentinel_master=m",
		"redis://" + addrs[0] + "/2?cluster=true", "redis://" + addrs[0] + "?cluster=1"} {
		if _, err := dlock.Open(ctx, u); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Open(%s): want ErrInvalidURL, got %v", u, err)
		}
	}
}

// TestSentinelFailoverDuringLease: a lease taken through the Sentinels
// (sentinel_master, wait_replicas=1) while the master is killed. The lease lives
// on: its refreshes fail while no master answers, the client finds the promoted
// replica through the Sentinels, and the first refresh after the promotion succeeds
// on it — the lock key reached a replica before the grant returned, so the promoted
// one has it, nobody else is granted the lock, and the next token is larger.
func TestSentinelFailoverDuringLease(t *testing.T) {
	g := servertest.RedisSentinelGroup(t, 2, 3)
	u := "redis://" + strings.Join(g.SentinelAddrs(), ",") + "?sentinel_master=" + g.MasterName + "&wait_replicas=1&wait_timeout=500ms"
	holder, other := servertest.Open(t, u), servertest.Open(t, u)
	ctx := ctxFor(t, 2*time.Minute)
	k := uniqueKey("sentinel-failover")
	const ttl = 20 * time.Second
	ls, err := holder.TryAcquire(ctx, k, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	old := g.Master.Addr()
	if err := g.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var refreshErrs []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ls.Refresh(rctx, ttl)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, dlock.ErrNotHeld) || time.Since(killed) > ttl/2 {
			t.Fatalf("refresh %v after the master's kill: %v (earlier: %q)", time.Since(killed), err, refreshErrs)
		}
		if len(refreshErrs) == 0 || refreshErrs[len(refreshErrs)-1] != err.Error() {
			refreshErrs = append(refreshErrs, err.Error())
		}
		time.Sleep(100 * time.Millisecond)
	}
	refreshed := time.Since(killed)
	promoted, err := g.WaitFailover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master %s killed; the lease's first successful refresh came %v later, on %s (promoted by the Sentinels); the refreshes before failed with %q",
		old, refreshed.Round(time.Millisecond), promoted, refreshErrs)
	select {
	case <-ls.Done():
		t.Fatalf("the lease ended across the failover: %v", ls.Err())
	default:
	}
	if _, err := other.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another client after the failover: want ErrNotAcquired, got %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatalf("Release on the promoted replica: %v", err)
	}
	next, err := other.TryAcquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= ls.Token() {
		t.Errorf("token after the failover %d, want more than %d", next.Token(), ls.Token())
	}
	_ = next.Release(ctx)
}

// TestInspect: dlock.Inspect reads each setting the deployment check knows and
// names the scenario it exposes the locks to.
func TestInspect(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	expect := func(t *testing.T, m map[string]spec.Finding, topic string, exposed bool, setting string) {
		t.Helper()
		f, ok := m[topic]
		if !ok || f.Exposed != exposed || !strings.Contains(f.Setting, setting) || f.Detail == "" {
			t.Errorf("%s: %+v, want exposed=%v with setting %q", topic, f, exposed, setting)
		}
	}
	t.Run("no persistence", func(t *testing.T) {
		m := servertest.Findings(t, "redis://"+sharedRedis(t).Addr())
		expect(t, m, "ServerRestart", true, `appendonly=no save=""`)
		expect(t, m, "MutualExclusion", false, "maxmemory-policy=noeviction")
		expect(t, m, "Failover", false, "connected_slaves:0")
		expect(t, m, "ClockJump", true, "wall clock")
	})
	t.Run("eviction and appendfsync always", func(t *testing.T) {
		r := privateRedis(t, servers.RedisOptions{AOF: "always", Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
		m := servertest.Findings(t, "redis://"+r.Addr())
		expect(t, m, "ServerRestart", false, "appendfsync=always")
		expect(t, m, "MutualExclusion", true, "maxmemory-policy=allkeys-lru")
		expect(t, m, "FencingMonotonic", true, "maxmemory-policy=allkeys-lru")
	})
	t.Run("replica", func(t *testing.T) {
		master, _ := servertest.RedisReplicaPair(t)
		expect(t, servertest.Findings(t, "redis://"+master.Addr()), "Failover", true, "connected_slaves:1 wait_replicas=0")
		expect(t, servertest.Findings(t, "redis://"+master.Addr()+"?wait_replicas=1"), "Failover", false, "wait_replicas=1")
		expect(t, servertest.Findings(t, "redis://"+master.Addr()+"?wait_replicas=2"), "Failover", true, "wait_replicas=2")
	})
	t.Run("lock user without CONFIG", func(t *testing.T) {
		_, _, u := secureRedis(t)
		m := servertest.Findings(t, u)
		expect(t, m, "ServerRestart", true, "NOPERM")
		expect(t, m, "Failover", true, "NOPERM")
	})
	t.Run("cluster", func(t *testing.T) {
		addrs := redisCluster(t).Addrs()
		fs, err := dlock.Inspect(ctx, "redis://"+addrs[0]+"?cluster=true")
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, f := range fs {
			if f.Scenario == spec.ServerRestart && f.Exposed {
				nodes[strings.SplitN(f.Setting, ": ", 2)[0]] = true
			}
		}
		if len(nodes) != 3 {
			t.Errorf("ServerRestart findings for %d masters, want 3: %+v", len(nodes), fs)
		}
	})
}

// TestFairReleaseWakesOnlyTheHead: in the fair mode a release tells the first waiter
// on a channel of its own (redisops.TurnChannel), so the waiters behind it are not
// woken — one wake-up per hand-off however many wait — while a listener of the
// key's channel (a waiter of the other mode) still hears every release.
func TestFairReleaseWakesOnlyTheHead(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	c := redis.NewClient(&redis.Options{Addr: sharedRedis(t).Addr()})
	defer c.Close()
	rel := redisops.NewReleases(c)
	defer rel.Close()
	key := uniqueKey("fair-wake")
	if res, err := redislock.FairAcquire(ctx, c, key, "holder", 10*time.Second, true, 0); err != nil || !res.Acquired {
		t.Fatalf("holder: %+v, %v", res, err)
	}
	for _, w := range []string{"first", "second"} {
		if res, err := redislock.FairAcquire(ctx, c, key, w, 10*time.Second, true, 0); err != nil || res.Acquired {
			t.Fatalf("%s queues: %+v, %v", w, res, err)
		}
	}
	first, stop1, err := rel.SubscribeTurn(ctx, key, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer stop1()
	second, stop2, err := rel.SubscribeTurn(ctx, key, "second")
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	any, stop3, err := rel.Subscribe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	if ok, err := redislock.FairRelease(ctx, c, key, "holder", false); err != nil || !ok {
		t.Fatalf("release: %v, %v", ok, err)
	}
	for name, ch := range map[string]<-chan struct{}{"the first waiter": first, "the key's channel": any} {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s was not told of the release", name)
		}
	}
	// The first waiter's message and the key channel's were published by the same
	// script after any to the second waiter would have been: both have arrived, so
	// a wake-up of the second would be in its channel by now.
	select {
	case <-second:
		t.Error("the second waiter was woken by a release that was not its turn")
	default:
	}
}

// TestMixedModesExclude: clients of the fair mode and of the default mode on one key
// exclude each other (both take the same lock key; the fair mode adds its queue):
// goroutines of each kind take the lock in turn, and none ever finds another inside.
func TestMixedModesExclude(t *testing.T) {
	addr := sharedRedis(t).Addr()
	plain, fair := redislock.New(client(t, addr)), redislock.New(client(t, addr), redislock.WithFIFO(true))
	defer plain.Close()
	defer fair.Close()
	locktest.MutuallyExclusive(t, uniqueKey("mixed"), plain, fair)
}

// TestReleaseReplyLost: a release whose reply is lost with its connection (the
// script ran: the lock is gone) is retried by go-redis, and the retry must not take
// the lock's absence for a loss — Release succeeds and the lease ends released, in
// every mode (a key, the fair mode, a set of keys, a semaphore). The proxy lets the
// release through and closes the connection when its reply comes back.
func TestReleaseReplyLost(t *testing.T) {
	r := sharedRedis(t)
	px := servertest.Proxy(t, r.Addr())
	ctx := ctxFor(t, time.Minute)
	for _, c := range []struct {
		name, query string
		take        func(l dlock.Locker, k string) (dlock.Lease, error)
	}{
		{"key", "", func(l dlock.Locker, k string) (dlock.Lease, error) { return l.TryAcquire(ctx, k) }},
		{"fifo", "?fifo=true", func(l dlock.Locker, k string) (dlock.Lease, error) { return l.TryAcquire(ctx, k) }},
		{"set", "", func(l dlock.Locker, k string) (dlock.Lease, error) {
			return dlock.TryAcquireAll(ctx, l, []string{k, "{" + k + "}/2"})
		}},
		{"semaphore", "", func(l dlock.Locker, k string) (dlock.Lease, error) {
			s, err := dlock.NewSemaphore(l, k, 2)
			if err != nil {
				return nil, err
			}
			return s.TryAcquire(ctx)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := servertest.Open(t, "redis://"+px.Addr()+c.query)
			// A first cycle loads the release script: the lost reply must be the
			// script's own, not a NOSCRIPT before it.
			warm, err := c.take(l, uniqueKey("warm-"+c.name))
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			k := uniqueKey("release-reply-lost-" + c.name)
			ls, err := c.take(l, k)
			if err != nil {
				t.Fatal(err)
			}
			px.LoseReply(k)
			defer px.Restore()
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("Release whose reply was lost (the script ran): %v; want success", err)
			}
			if !errors.Is(ls.Err(), dlock.ErrReleased) {
				t.Fatalf("the lease ended with %v, want ErrReleased", ls.Err())
			}
			if again, err := c.take(l, k); err != nil {
				t.Fatalf("the key after its release: %v", err)
			} else {
				_ = again.Release(ctx)
			}
		})
	}
}

// TestCloseWaitsForWaiters (fair mode): a waiter whose Locker closes leaves the queue
// before the client closes, and a grant that lands during Close is released
// (closetest).
func TestCloseWaitsForWaiters(t *testing.T) {
	r := sharedRedis(t)
	admin := client(t, r.Addr())
	closetest.Run(t, closetest.Target{
		Addr:    r.Addr(),
		URL:     func(addr string) string { return "redis://" + addr + "?fifo=true" },
		Waiting: func(t testing.TB, key string) int { return waiting(t, admin, key) },
	})
}
