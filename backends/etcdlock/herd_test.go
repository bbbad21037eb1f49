package etcdlock_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/internal/herdtest"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// metric reads a counter or gauge without labels from the member's /metrics.
func metric(t testing.TB, e *servers.Etcd, name string) int64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxFor(t, 5*time.Second), http.MethodGet, "http://"+e.Addr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s %q: %v", name, v, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("/metrics has no %s (%v)", name, sc.Err())
	return 0
}

// awaitWatchers waits until the member holds at least n watchers.
func awaitWatchers(t testing.TB, e *servers.Etcd, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, e, "etcd_debugging_mvcc_watcher_total") < n {
		if time.Now().After(deadline) {
			t.Fatalf("the member never held %d watchers", n)
		}
		time.Sleep(20 * time.Millisecond) // the member has no signal for "a watch was set": poll it
	}
}

// TestNoHerd: 100 waiters on one key, each handing the lock on as soon as it is
// granted; every release sends O(1) watch events (the successor's watch on the
// key just before its own), not one per waiter, counted by the member
// (etcd_debugging_mvcc_events_total: the events it sent to watchers). The same
// count sees a herd where there is one: 20 clients watching the queue's prefix.
func TestNoHerd(t *testing.T) {
	e := servertest.NewEtcd(t, servers.EtcdOptions{})
	const waiters = 100
	prefix := "/dlock-herd-" + randHex(4)
	k := "herd"
	open := func() dlock.Locker {
		l := etcdlock.New(newClient(t, e.Endpoints()), etcdlock.WithPrefix(prefix), etcdlock.OwnClient())
		t.Cleanup(func() { l.Close() })
		return l
	}
	holder := open()
	lh, err := holder.TryAcquire(ctxFor(t, 10*time.Second), k)
	if err != nil {
		t.Fatal(err)
	}
	base := metric(t, e, "etcd_debugging_mvcc_watcher_total")
	ls := make([]dlock.Locker, waiters)
	for i := range ls {
		ls[i] = open()
	}
	done := herdtest.Churn(ls, 1, func(l dlock.Locker) (dlock.Lease, error) {
		return l.Acquire(ctxFor(t, 2*time.Minute), k)
	})
	admin := newClient(t, e.Endpoints())
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := admin.Get(ctxFor(t, 5*time.Second), etcdlock.QueueName(prefix, k)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == waiters+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys queued after a minute, want %d", resp.Count, waiters+1)
		}
		time.Sleep(5 * time.Millisecond) // the store has no signal for "a waiter queued": poll it
	}
	awaitWatchers(t, e, base+waiters) // each waiter watches its predecessor
	before := metric(t, e, "etcd_debugging_mvcc_events_total")
	if err := lh.Release(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	events := metric(t, e, "etcd_debugging_mvcc_events_total") - before
	releases := waiters + 1
	t.Logf("%d releases with %d waiters queued: %d watch events sent (%.2f per release)", releases, waiters, events, float64(events)/float64(releases))
	if per := float64(events) / float64(releases); per > 3 {
		t.Errorf("%.1f watch events per release with %d waiters: a herd", per, waiters)
	}

	t.Run("herd control", func(t *testing.T) {
		const herd = 20
		q := etcdlock.QueueName(prefix, "control") + "/"
		if _, err := admin.Put(ctxFor(t, 5*time.Second), q+"holder", ""); err != nil {
			t.Fatal(err)
		}
		base := metric(t, e, "etcd_debugging_mvcc_watcher_total")
		got := make(chan struct{}, herd)
		for range herd {
			wctx, cancel := context.WithCancel(ctxFor(t, 30*time.Second))
			defer cancel()
			wch := newClient(t, e.Endpoints()).Watch(wctx, q, clientv3.WithPrefix(), clientv3.WithFilterPut())
			go func() {
				for wr := range wch {
					if len(wr.Events) > 0 {
						got <- struct{}{}
						return
					}
				}
			}()
		}
		awaitWatchers(t, e, base+herd)
		before := metric(t, e, "etcd_debugging_mvcc_events_total")
		if _, err := admin.Delete(ctxFor(t, 5*time.Second), q+"holder"); err != nil {
			t.Fatal(err)
		}
		for range herd {
			<-got
		}
		if n := metric(t, e, "etcd_debugging_mvcc_events_total") - before; n < herd {
			t.Errorf("control: %d clients watching the queue got %d events for one release; the counter misses events", herd, n)
		}
	})
}
