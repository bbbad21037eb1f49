package servertest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/servers"
)

// recTB records the first Skip or Fatal and stops the goroutine, as testing does.
type recTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recTB) Helper() {}
func (r *recTB) Skipf(f string, a ...any) {
	r.skipped = fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (r *recTB) Fatalf(f string, a ...any) {
	r.fatal = fmt.Sprintf(f, a...)
	runtime.Goexit()
}

func runCheck(err error) *recTB {
	r := &recTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		check(r, "redis", err)
	}()
	<-done
	return r
}

func TestMissingSkipsUnlessRequired(t *testing.T) {
	missing := fmt.Errorf("start: %w", &servers.MissingError{What: "redis-server",
		Install: "sudo apt-get install -y --no-install-recommends redis-server (or: make deps)"})

	t.Setenv(servers.EnvRequire, "")
	r := runCheck(missing)
	if r.fatal != "" || !strings.Contains(r.skipped, "apt-get install -y --no-install-recommends redis-server") {
		t.Fatalf("missing, not required: skipped %q, fatal %q; want a skip with the install command", r.skipped, r.fatal)
	}

	t.Setenv(servers.EnvRequire, "1")
	r = runCheck(missing)
	if r.skipped != "" || !strings.Contains(r.fatal, "redis-server not found") {
		t.Fatalf("missing, required: skipped %q, fatal %q; want a failure", r.skipped, r.fatal)
	}

	t.Setenv(servers.EnvRequire, "")
	r = runCheck(errors.New("boom"))
	if r.skipped != "" || !strings.Contains(r.fatal, "boom") {
		t.Fatalf("other error: skipped %q, fatal %q; want a failure", r.skipped, r.fatal)
	}

	r = runCheck(nil)
	if r.skipped != "" || r.fatal != "" {
		t.Fatalf("nil error: skipped %q, fatal %q", r.skipped, r.fatal)
	}
}

// A server kind without a container image, asked for under DLOCK_SERVERS=docker,
// skips even when servers are required: the container path does not run it.
func TestNoImageSkips(t *testing.T) {
	t.Setenv(servers.EnvRequire, "1")
	r := runCheck(fmt.Errorf("start: %w", &servers.NoImageError{What: "PostgreSQL"}))
	if r.fatal != "" || !strings.Contains(r.skipped, "PostgreSQL has no container image") {
		t.Fatalf("no image, required: skipped %q, fatal %q; want a skip naming the server", r.skipped, r.fatal)
	}
}
