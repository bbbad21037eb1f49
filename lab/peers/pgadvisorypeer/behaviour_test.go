package pgadvisorypeer_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	h := newHarness(t)
	peertest.CheckOpen(t, h.peerURL(h.server.Addr()))
}

// TestCutHolderLearnsAtRelease shows what a holder whose connection is cut goes
// through: the server ends its session and frees the lock for another client at once,
// the holder's lease stays open (nothing tells pgx), and its Release finds the lock
// gone.
func TestCutHolderLearnsAtRelease(t *testing.T) {
	h := newHarness(t)
	a, b := h.NewLocker(t), h.NewLocker(t)
	peertest.CheckCutHolderLearnsAtRelease(t, a, b, func() { h.Vanish(t, a) })
}

// TestHashCollisionSharesALock: two different keys whose hashtext values are equal
// are one lock, as users map keys: while one is held, the other cannot be taken.
// The pair is found by the server among keys "collision/1", "collision/2", …
// (hashtext is a 32-bit hash: among that many keys, pairs are expected by the
// birthday bound; the search is deterministic).
func TestHashCollisionSharesALock(t *testing.T) {
	h := newHarness(t)
	var k1, k2 string
	err := h.admin.QueryRow(ctxFor(t, time.Minute), `SELECT min(k), max(k) FROM
	  (SELECT 'collision/' || i AS k FROM generate_series(1, 300000) AS i) AS keys
	  GROUP BY hashtext(k) HAVING count(*) > 1 ORDER BY min(k) LIMIT 1`).Scan(&k1, &k2)
	if err != nil {
		t.Fatalf("looking for two keys with one hashtext: %v", err)
	}
	t.Logf("%q and %q have one hashtext", k1, k2)
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx := ctxFor(t, 20*time.Second)
	la, err := a.TryAcquire(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if lb, err := b.TryAcquire(ctx, k2); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			_ = lb.Release(ctx)
		}
		t.Fatalf("TryAcquire(%q) while %q is held (one hashtext): want ErrNotAcquired, got %v: keys no longer collide; update the docs", k2, k1, err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryAcquire(ctx, k2)
	if err != nil {
		t.Fatalf("TryAcquire(%q) once %q is released: %v", k2, k1, err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
