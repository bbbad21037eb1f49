package etcdpeer_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/internal/measure"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/etcdpeer"
)

// BenchmarkUncontended alternates acquire+release cycles of dlock's etcdlock
// (Acquire, the queueing path, and TryAcquire) with cycles of etcd's
// concurrency.Mutex (this package: Lock, Unlock) on the same etcd member, each on a key of its own, and
// reports each one's p50 and the ratios. Alternating keeps the comparison fair on a
// machine whose load drifts. One iteration is rounds cycles of each; run it with
// -benchtime=1x.
func BenchmarkUncontended(b *testing.B) {
	const rounds = 300
	e := servertest.Etcd(b)
	prefix := "/dlock-bench-" + randHex(4)
	h := harness{e}
	dl := etcdlock.New(h.client(b), etcdlock.WithPrefix(prefix))
	defer dl.Close()
	mu := newMutex(b, h.client(b), prefix)
	ctx := context.Background()
	acquire := func(l dlock.Locker, k string) func() error {
		return func() error {
			ls, err := l.Acquire(ctx, k)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}
	}
	cycles := []struct {
		name string
		f    func() error
	}{
		{"dlock-acquire", acquire(dl, "u-acquire")},
		{"dlock-try", func() error { return measure.Cycle(ctx, dl, "u-try") }},
		{"mutex", acquire(mu, "u-mutex")},
	}
	for b.Loop() {
		samples := make([][]time.Duration, len(cycles))
		for r := range rounds + 1 {
			for i, c := range cycles {
				t0 := time.Now()
				if err := c.f(); err != nil {
					b.Fatalf("%s: %v", c.name, err)
				}
				if r > 0 { // round 0 warms up connections and leases
					samples[i] = append(samples[i], time.Since(t0))
				}
			}
		}
		lat := make([]measure.Latency, len(cycles))
		for i, c := range cycles {
			lat[i] = measure.Summarize(samples[i])
			b.Logf("%s: p50 %v p99 %v", c.name, lat[i].P50, lat[i].P99)
			b.ReportMetric(float64(lat[i].P50.Microseconds()), c.name+"-p50-µs")
		}
		b.ReportMetric(float64(lat[0].P50)/float64(lat[2].P50), "acquire/mutex")
		b.ReportMetric(float64(lat[1].P50)/float64(lat[2].P50), "try/mutex")
	}
}

// BenchmarkContended runs 8 clients (each with its own etcd connection) contending on
// one key for 3s with dlock, then with concurrency.Mutex (this package), and
// reports the hand-offs per second of each, their ratio, and the CPU time the process
// spent per hand-off. Run it with -benchtime=1x.
func BenchmarkContended(b *testing.B) {
	const clients, d = 8, 3 * time.Second
	e := servertest.Etcd(b)
	prefix := "/dlock-bench-" + randHex(4)
	ctx := context.Background()
	for b.Loop() {
		var dls, mus []dlock.Locker
		for range clients {
			h := harness{e}
			l := etcdlock.New(h.client(b), etcdlock.WithPrefix(prefix))
			defer l.Close()
			dls = append(dls, l)
			mus = append(mus, newMutex(b, h.client(b), prefix))
		}
		cpu0 := cpuTime(b, e)
		dc, err := measure.Contend(ctx, dls, "c-dlock-"+randHex(4), d, 0)
		if err != nil {
			b.Fatalf("dlock: %v", err)
		}
		cpu1 := cpuTime(b, e)
		mc, err := measure.Contend(ctx, mus, "c-mutex-"+randHex(4), d, 0)
		if err != nil {
			b.Fatalf("mutex: %v", err)
		}
		cpu2 := cpuTime(b, e)
		dcpu := (cpu1 - cpu0) / time.Duration(max(dc.Handoffs, 1))
		mcpu := (cpu2 - cpu1) / time.Duration(max(mc.Handoffs, 1))
		b.Logf("dlock: %v, %v CPU per hand-off (server and clients)", dc, dcpu)
		b.Logf("mutex: %v, %v CPU per hand-off (server and clients)", mc, mcpu)
		b.ReportMetric(float64(dcpu.Microseconds()), "dlock-cpu-µs/handoff")
		b.ReportMetric(float64(mcpu.Microseconds()), "mutex-cpu-µs/handoff")
		b.ReportMetric(dc.Rate, "dlock-handoffs/s")
		b.ReportMetric(mc.Rate, "mutex-handoffs/s")
		b.ReportMetric(dc.Rate/mc.Rate, "dlock/mutex")
	}
}

// cpuTime is the CPU time (user and system) that this process (every client) and the
// etcd member's process have used. Per hand-off it is a measure of work that the machine's
// load does not blur the way wall-clock rates are.
func cpuTime(b *testing.B, e *servers.Etcd) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	server, err := e.CPU()
	if err != nil {
		b.Fatalf("the etcd member's CPU time: %v", err)
	}
	return time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) + server
}

// newMutex returns etcd's concurrency.Mutex as a dlock.Locker on the lock names
// etcdlock uses under prefix (for keys that need no escaping).
func newMutex(b *testing.B, cli *clientv3.Client, prefix string) dlock.Locker {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := etcdpeer.New(ctx, cli, etcdpeer.WithPrefix(prefix+"/"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

func randHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}
