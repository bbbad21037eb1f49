package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestRefreshAfterValidity: a refresh that starts once the lock's validity is over
// asks no master and is not dlock.ErrNotHeld — no master refused anything, and
// dlock reports ErrNotHeld from a refresh as the store no longer holding the lock
// (CauseRefused), where the lease in fact ran out (CauseUnreachable for an
// auto-renewed one, from dlock's own deadline). A refresh within the validity
// still works.
func TestRefreshAfterValidity(t *testing.T) {
	var clients []redis.UniversalClient
	for _, r := range servertest.RedisMasters(t, 3) {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	d := newDriver(clients, config{drift: driver.StandardDrift})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const ttl = time.Second
	lk, err := d.TryLock(ctx, t.Name(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh within the validity: %v", err)
	}
	l := lk.(*lock)
	time.Sleep(time.Until(l.validUntil)) // the validity runs out: a wait for the clock, not for a signal
	err = lk.Refresh(ctx, ttl)
	if errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, errValidityOver) {
		t.Fatalf("Refresh after the validity: %v; want errValidityOver, not ErrNotHeld", err)
	}
	_ = lk.Unlock(ctx) // the keys may still be on the masters, for a few ms at most
}

// TestReleaseKeys: the keys and channel releaseKeys cuts from one string are the
// ones each key function names, also for keys with a hash tag or braces.
func TestReleaseKeys(t *testing.T) {
	for _, key := range []string{"k", "{user}:k", "a{b", "a}b{", "{}x", ""} {
		keys, channel := releaseKeys(key, "v1")
		want := [5]string{redisops.LockKey(key), redisops.ReleasedKey(key, "v1"), queueKey(key), deadlineKey(key), wokenKey(key)}
		if keys != want {
			t.Errorf("releaseKeys(%q) = %q, want %q", key, keys, want)
		}
		if channel != redisops.Channel(key) {
			t.Errorf("releaseKeys(%q) channel %q, want %q", key, channel, redisops.Channel(key))
		}
	}
}

// TestReservedValueInScripts: the reservation value the scripts write and take
// (release.lua, wait.lua) is the one reservedPrefix names.
func TestReservedValueInScripts(t *testing.T) {
	const lua = `'\255woken '` // Lua's decimal escape for the byte 0xff
	if reservedPrefix != "\xff"+"woken " {
		t.Fatalf("reservedPrefix %q, want the scripts' %s", reservedPrefix, lua)
	}
	for name, src := range map[string]string{"release.lua": releaseSrc, "wait.lua": waitSrc} {
		if !strings.Contains(src, lua) {
			t.Errorf("%s does not write or take the reservation %s", name, lua)
		}
	}
}
