package getlockpeer_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	cfg, err := mysql.ParseDSN(servertest.MySQL(t).DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	peertest.CheckOpen(t, "peer+getlock://"+url.UserPassword(cfg.User, cfg.Passwd).String()+"@"+cfg.Addr+"/")
}

func TestCutHolderLearnsAtRelease(t *testing.T) {
	h := newHarness(t)
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	k := t.Name()
	la, err := a.TryAcquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	h.Vanish(t, a)
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
