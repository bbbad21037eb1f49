// Package peertest holds the checks every peer's tests share.
package peertest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/conformance"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// CheckOpen opens two Lockers on rawURL with dlock.Open and checks that they exclude
// each other on one key and that both close cleanly; then that an unknown query
// parameter is refused with dlock.ErrInvalidURL.
func CheckOpen(t *testing.T, rawURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := dlock.Open(ctx, rawURL)
	if err != nil {
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	b, err := dlock.Open(ctx, rawURL)
	if err != nil {
		_ = a.Close()
		t.Fatalf("Open(%q): %v", rawURL, err)
	}
	key := "peertest/" + t.Name()
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Errorf("TryAcquire on a free key: %v", err)
	} else {
		if _, err := b.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryAcquire of a key held by another Locker of the same URL: want ErrNotAcquired, got %v", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if lb, err := b.TryAcquire(ctx, key); err != nil {
			t.Errorf("TryAcquire after the holder's Release: %v", err)
		} else if err := lb.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	for _, l := range []dlock.Locker{a, b} {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	if l, err := dlock.Open(ctx, rawURL+sep+"bogus=1"); !errors.Is(err, dlock.ErrInvalidURL) {
		if err == nil {
			_ = l.Close()
		}
		t.Errorf("Open with an unknown query parameter: want ErrInvalidURL, got %v", err)
	}
}

// Main is the TestMain of a peer's tests: a holder process of a fault scenario runs
// its part and exits (conformance.ChildMain); otherwise the tests run on the servers
// of package servertest, which are stopped at the end (servertest.Main).
func Main(m *testing.M) {
	conformance.ChildMain()
	servertest.Main(m)
}

// CheckCutHolderLearnsAtRelease checks what a holder of a lock that lives as long as
// its connection goes through when cut closes that connection (a crash, a reset):
// the server frees the lock for another client (b) at once, the holder's lease (a's)
// stays open, as nothing tells the client, and its Release finds the lock gone
// (ErrNotHeld, then Err is ErrLost).
func CheckCutHolderLearnsAtRelease(t *testing.T, a, b dlock.Locker, cut func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := t.Name()
	la, err := a.TryAcquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	cut()
	lb, err := b.Acquire(ctx, k)
	if err != nil {
		t.Fatalf("another client's Acquire after the holder's connection was cut: %v", err)
	}
	defer func() { _ = lb.Release(ctx) }()
	if err := la.Err(); err != nil {
		t.Fatalf("the cut holder's lease ended by itself (%v): the adapter now learns of the cut; update the docs and DoneAndErr", err)
	}
	if err := la.Release(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Release by the cut holder: want ErrNotHeld, got %v", err)
	}
	if err := la.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Err after that Release: want ErrLost, got %v", err)
	}
}

// RunFaultsSideBySide runs the fault campaign on two harnesses of one peer at once:
// holders (the holder-process scenarios: crash, pause) and partition (the
// blackholed holder). For a lock that lives as long as its connection, a paused or
// blackholed holder keeps it until the server's idle timeout, so those scenarios
// wait out the suite's bound once each; side by side, the waits overlap.
func RunFaultsSideBySide(t *testing.T, holders, partition func(t *testing.T) conformance.Harness) {
	t.Run("holders", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, holders(t))
	})
	t.Run("partition", func(t *testing.T) {
		t.Parallel()
		conformance.RunFaults(t, partition(t))
	})
}
