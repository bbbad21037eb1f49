package bench

import (
	"context"
	"errors"
	"testing"
)

// BenchmarkPrimitives measures, per backend with semaphores or read-write locks,
// the semaphore's acquire+release p50 against its mutex's (interleaved,
// DefaultConfig.Rounds/4 rounds), contended permits/s (PrimClients clients,
// PrimPermits permits) and shared leases/s (PrimReaders readers), each for
// DefaultConfig.Duration per iteration:
//
//	go test -run '^$' -bench Primitives ./internal/bench
func BenchmarkPrimitives(b *testing.B) {
	c := DefaultConfig
	eachTarget(b, func(b *testing.B, e *env, t Target) {
		if t.Kind != Backend {
			b.Skip("a peer: no primitives")
		}
		for b.Loop() {
			p, err := primitives(context.Background(), e.ep, t, c.TTL, c.Warmup, c.Rounds/4, c.Duration)
			if errors.Is(err, errors.ErrUnsupported) {
				b.Skip("no primitives")
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Log(p)
			if p.Semaphore != nil {
				b.ReportMetric(float64(p.Semaphore.P50.Microseconds()), "semaphore-p50-µs")
				b.ReportMetric(float64(p.Mutex.P50.Microseconds()), "mutex-p50-µs")
				b.ReportMetric(p.Ratio, "semaphore/mutex")
				b.ReportMetric(p.PermitsPerSec, "permits/s")
			}
			if p.ReadLock {
				b.ReportMetric(p.SharedPerSec, "shared/s")
			}
		}
	})
}
