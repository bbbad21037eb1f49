package main

import (
	"fmt"

	"github.com/dlock-go/dlock/lab/bench"
)

// primitiveColumns are the speed table's columns of the primitives beyond the mutex
// (internal/bench's MPrimitives), and primitiveValues a row's values for them.
func primitiveColumns() []string {
	return []string{"semaphore ÷ mutex p50 (target ≤ 1.3)",
		fmt.Sprintf("permits/s (%d clients, %d permits)", bench.PrimClients, bench.PrimPermits),
		fmt.Sprintf("shared leases/s (%d readers)", bench.PrimReaders)}
}

func primitiveValues(r bench.Row) []string {
	out := []string{"–", "–", "–"}
	p := r.Primitives
	if p == nil {
		return out
	}
	if p.Semaphore != nil {
		out[0], out[1] = fmt.Sprintf("%.2f", p.Ratio), fmt.Sprintf("%.0f", p.PermitsPerSec)
	}
	if p.ReadLock {
		out[2] = fmt.Sprintf("%.0f", p.SharedPerSec)
	}
	return out
}
