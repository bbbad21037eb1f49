package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/backends/redislock"
	"github.com/dlock-go/dlock/internal/measure"
)

// BenchmarkAcquireRelease compares one uncontended TryAcquire+Release of New with the
// floor it is built on, two raw round trips (SET NX PX, then DEL) on the same server,
// in the same run. Each reports its p50 as p50-ns (speed is not asserted).
//
//	go test -run '^$' -bench AcquireRelease -benchtime 20000x ./backends/redislock/
func BenchmarkAcquireRelease(b *testing.B) {
	addr := sharedRedis(b).Addr()
	ctx := context.Background()
	report := func(b *testing.B, lat measure.Latency, err error) {
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(lat.P50.Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat.P99.Nanoseconds()), "p99-ns")
	}
	b.Run("raw-2rtt", func(b *testing.B) {
		c := client(b, addr)
		k := uniqueKey("bench-raw")
		b.ResetTimer()
		lat, err := measure.Measure(b.N, func() error {
			if err := c.SetNX(ctx, k, "v", 10*time.Second).Err(); err != nil {
				return err
			}
			return c.Del(ctx, k).Err()
		})
		report(b, lat, err)
	})
	b.Run("redislock", func(b *testing.B) {
		l := redislock.New(client(b, addr))
		defer l.Close()
		k := uniqueKey("bench-dlock")
		b.ResetTimer()
		lat, err := measure.Uncontended(ctx, l, k, b.N)
		report(b, lat, err)
	})
}
