package locktest

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/backends/memlock"
)

// TestMutuallyExclusiveCatchesOverlap: on two clients of two separate lock spaces
// (no exclusion between them at all) the check fails; on two clients of one it
// passes. The failing run is a child test process, so that its failure is observed.
func TestMutuallyExclusiveCatchesOverlap(t *testing.T) {
	if os.Getenv("LOCKTEST_CHILD") == "1" {
		MutuallyExclusive(t, "k", memlock.New(memlock.WithStore(memlock.NewStore())), memlock.New(memlock.WithStore(memlock.NewStore())))
		return
	}
	one := memlock.NewStore()
	MutuallyExclusive(t, "k", memlock.New(memlock.WithStore(one)), memlock.New(memlock.WithStore(one)))
	cmd := exec.Command(os.Args[0], "-test.run=^TestMutuallyExclusiveCatchesOverlap$", "-test.count=1")
	cmd.Env = append(os.Environ(), "LOCKTEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "holders inside at once") {
		t.Fatalf("two separate lock spaces: want the check to fail with an overlap, got err %v:\n%s", err, out)
	}
}
