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
