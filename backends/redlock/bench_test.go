package redlock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/internal/measure"
)

// BenchmarkQuorumCost measures what the quorum costs: one uncontended
// acquire+release over 1 master and over 5 masters, alternating in the same loop on
// the same servers (so that the machine's load hits both alike), and, after them,
// the same scripts sent by hand. It reports the p50 and p99 of each and the ratio of
// the p50s (5 masters / 1 master). go-redsync over 5 masters is the lab's to compare
// (dlock-lab bench --targets 'redlock(5),redsync(5)'):
//
//	go test -run '^$' -bench QuorumCost -benchtime 3000x ./backends/redlock/
func BenchmarkQuorumCost(b *testing.B) {
	rs := privateMasters(b, masters, false)
	// A long per-node timeout: a load spike on this shared machine must not end the
	// run with ErrUnavailable; it does not change the latency of answered requests.
	slow := redlock.WithNodeTimeout(time.Second)
	one, five := newLocker(b, rs[:1], slow), newLocker(b, rs, slow)
	ctx := b.Context()
	k := key(b)
	var d1, d5 []time.Duration
	for b.Loop() {
		for _, x := range []struct {
			l dlock.Locker
			k string
			d *[]time.Duration
		}{{one, k + "/1", &d1}, {five, k + "/5", &d5}} {
			t0 := time.Now()
			if err := measure.Cycle(ctx, x.l, x.k); err != nil {
				b.Fatal(err)
			}
			*x.d = append(*x.d, time.Since(t0))
		}
	}
	l1, l5 := measure.Summarize(d1), measure.Summarize(d5)
	report(b, "1m", l1)
	report(b, "5m", l5)
	b.ReportMetric(float64(l5.P50)/float64(l1.P50), "p50-5m/1m")

	// The floor: the same scripts sent by hand, to 1 master, and to 5 in parallel
	// goroutines, each phase ending at the third answer.
	cs := clients(b, rs)
	raw := func(n int) measure.Latency {
		lat, err := measure.Measure(len(d5), func() error {
			v := redisops.NewValue()
			if err := firstAnswers(cs[:n], n/2+1, func(c redis.UniversalClient) error {
				_, _, _, err := redisops.Acquire(ctx, c, k+"/raw", v, 10*time.Second)
				return err
			}); err != nil {
				return err
			}
			return firstAnswers(cs[:n], n/2+1, func(c redis.UniversalClient) error {
				_, err := redisops.Release(ctx, c, k+"/raw", v)
				return err
			})
		})
		if err != nil {
			b.Fatal(err)
		}
		return lat
	}
	r1, r5 := raw(1), raw(5)
	report(b, "raw1m", r1)
	report(b, "raw5m", r5)
	b.ReportMetric(float64(r5.P50)/float64(r1.P50), "p50-raw5m/raw1m")
}

// firstAnswers runs f on every client in parallel and returns after need of them
// answered (the first error, if any, of those).
func firstAnswers(cs []redis.UniversalClient, need int, f func(redis.UniversalClient) error) error {
	errs := make(chan error, len(cs))
	for _, c := range cs {
		go func() { errs <- f(c) }()
	}
	for range need {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func report(b *testing.B, name string, l measure.Latency) {
	b.ReportMetric(float64(l.P50.Microseconds()), "µs-p50-"+name)
	b.ReportMetric(float64(l.P99.Microseconds()), "µs-p99-"+name)
}
