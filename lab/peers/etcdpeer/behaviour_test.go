package etcdpeer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOneSessionGrantsTwice(t *testing.T) {
	h := harness{servertest.Etcd(t)}
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := t.Name()
	first, err := a.TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("TryAcquire on a free key: %v", err)
	}
	if _, err := b.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire from another session: want ErrNotAcquired, got %v", err)
	}
	second, err := a.TryAcquire(ctx, k)
	if err != nil {
		t.Fatalf("the library changed: a second TryAcquire through the same session was refused (%v); "+
			"declare ConcurrentUse a guarantee of this peer", err)
	}
	t.Logf("two leases of %q at once through one session: tokens %d and %d", k, first.Token(), second.Token())
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The first Release deleted the session's key: the second lease's lock is gone too.
	if _, err := b.TryAcquire(ctx, k); err != nil {
		t.Fatalf("after the first lease's Release another session should get the key (the second lease shared it): %v", err)
	}
}

func TestOpen(t *testing.T) {
	peertest.CheckOpen(t, "peer+etcd://"+servertest.Etcd(t).Addr()+"/peertest?session_ttl=2")
}
