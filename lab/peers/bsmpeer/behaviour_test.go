package bsmpeer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	peertest.CheckOpen(t, "peer+bsm://"+servertest.Redis(t).Addr())
}

func TestAcquireWithoutDeadlineStopsAfterTTL(t *testing.T) {
	h := harness{servertest.Redis(t)}
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx := context.Background()
	k := t.Name()
	la, err := a.TryAcquire(ctx, k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = la.Release(ctx) }()
	const ttl = 300 * time.Millisecond
	t0 := time.Now()
	_, err = b.Acquire(ctx, k, dlock.WithTTL(ttl))
	took := time.Since(t0)
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Acquire of a held key without a ctx deadline: want ErrNotAcquired after the ttl, got %v", err)
	}
	if took < ttl || took > ttl+5*time.Second {
		t.Fatalf("gave up after %v, want about the ttl %v", took, ttl)
	}
	t.Logf("gave up after %v (ttl %v): %v", took.Round(time.Millisecond), ttl, err)
}
