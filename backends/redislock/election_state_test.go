package redislock_test

import (
	"bufio"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestElectionStateExpires: an election's log expires one TTL after its latest
// term and its term key with the term, so that once its last leader is gone the
// election keeps only its term counter, which never expires: the next term's token
// is above the last one's however long the gap. An observer that stays behind
// while the log of a long term expires (its channel not read) still reports that
// term's leader, from the term key.
func TestElectionStateExpires(t *testing.T) {
	r := servertest.Redis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { c.Close() })
	l := servertest.Open(t, "redis://"+r.Addr())
	name := uniqueKey("election-state")
	e, err := dlock.NewElection(l, name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t, 30*time.Second)
	const ttl = 300 * time.Millisecond
	pttl := func(k string) time.Duration {
		t.Helper()
		d, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	gone := func(k string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); c.Exists(ctx, k).Val() == 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%q still exists 5s later (PTTL %v)", k, pttl(k))
			}
		}
	}
	// The first term is released, not left to expire: its TTL only has to outlast
	// the wait for the observer below, however slow the machine.
	const firstTTL = 20 * time.Second
	first, err := e.TryCampaign(ctx, "first", dlock.WithTTL(firstTTL))
	if err != nil {
		t.Fatal(err)
	}
	// The observer reads the election in a goroutine of its own, some time after
	// Observe returns: it must have read the first term (and be stuck handing it
	// over, its channel unread) before that term ends, or it never sees that term.
	// MONITOR shows its read: the MGET of the election's keys, which nothing else
	// here sends.
	sawRead := monitorFor(t, r.Addr(), `"mget"`, name)
	obsCtx, stop := context.WithCancel(ctx)
	defer stop()
	observer := e.Observe(obsCtx) // left unread while the terms below come and go
	sawRead()
	if d := pttl(redislock.ElectionLogKey(name)); d <= 0 || d > firstTTL {
		t.Errorf("the log's PTTL is %v, want (0, %v]: it must expire with the term", d, firstTTL)
	}
	if d := pttl(redislock.ElectionTermKey(name)); d != -1 {
		t.Errorf("the term counter's PTTL is %v, want -1 (kept)", d)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := e.Campaign(ctx, "second", dlock.WithTTL(ttl), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	if second.Token() <= first.Token() {
		t.Errorf("second term's token %d, want above the first's %d", second.Token(), first.Token())
	}
	gone(redislock.ElectionLogKey(name)) // while the second term lasts
	for _, want := range []string{"first", "second"} {
		select {
		case ld := <-observer:
			if ld.Value != want {
				t.Errorf("the observer reported %q, want %q", ld.Value, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the observer did not report %q within 5s", want)
		}
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	gone(redislock.ElectionKey(name))
	gone(redislock.ElectionLogKey(name))
	if n := c.Exists(ctx, redislock.ElectionTermKey(name)).Val(); n != 1 {
		t.Fatalf("the term counter is gone")
	}
	third, err := e.TryCampaign(ctx, "third", dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer third.Release(ctx)
	if third.Token() <= second.Token() {
		t.Errorf("after the election's state expired, a term got token %d, want above %d", third.Token(), second.Token())
	}
}

// monitorFor watches the commands that the Redis server at addr receives (MONITOR,
// on a connection of its own, already listening when it returns). The function it
// returns waits until a command line containing each of want has come (MONITOR
// quotes what is not printable: match plain parts), then stops watching.
func monitorFor(t *testing.T, addr string, want ...string) func() {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("MONITOR: %q, %v", line, err)
	}
	return func() {
		t.Helper()
		defer conn.Close()
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("MONITOR: no command with %q came: %v", want, err)
			}
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(line, w) }) {
				return
			}
		}
	}
}
