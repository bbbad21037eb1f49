package memlock_test

import (
	"testing"

	"github.com/dlock-go/dlock/backends/memlock"
	"github.com/dlock-go/dlock/conformance"
)

// TestFaults: no fault applies to an in-process store (no server to restart, no
// link to cut, no other process to share it with); every scenario is reported not
// applicable.
func TestFaults(t *testing.T) {
	conformance.RunFaults(t, harness{memlock.NewStore()})
}
