package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Variant names one of the classic SETNX algorithms of NewSETNX.
type Variant string

const (
	// SETNXExpire: SETNX key value, then EXPIRE key ttl as a second command; DEL to
	// release. A client that dies between the two commands leaves a lock that never
	// expires (deadlock freedom violated), and DEL frees whoever holds the key, so a
	// holder whose lock expired frees its successor's lock (owner-only release
	// violated).
	SETNXExpire Variant = "setnx+expire"
	// SETNXGetSet: SETNX key <now+ttl> with the client's clock; a waiter that finds the
	// stored time past takes the key over with GETSET and wins only if GETSET returned
	// the time it saw; DEL to release. A client whose clock runs ahead takes over a
	// live lock (mutual exclusion violated), a losing taker still overwrites the
	// winner's expiry time, and DEL frees whoever holds the key (owner-only release
	// violated). The key has no Redis TTL: it stays until deleted.
	SETNXGetSet Variant = "setnx+getset"
)

// ParseVariant accepts a Variant's name, or its short form "expire" or "getset".
func ParseVariant(s string) (Variant, error) {
	switch s {
	case "expire", string(SETNXExpire):
		return SETNXExpire, nil
	case "getset", string(SETNXGetSet):
		return SETNXGetSet, nil
	}
	return "", fmt.Errorf("redislock: unknown SETNX variant %q (want expire or getset)", s)
}

// NewSETNX returns a Locker that runs the classic SETNX algorithm v on client, as the
// seed articles describe it. It exists to compare against New and to show, in the
// conformance suite, what each of these algorithms gets wrong (see Variant). Do not
// use it to protect anything: use New. Tokens are always 0 (no fencing) and Refresh
// returns errors.ErrUnsupported (the algorithms have none). Closing the Locker does
// not close client. It panics if v is not SETNXExpire or SETNXGetSet.
func NewSETNX(client redis.UniversalClient, v Variant) dlock.Locker {
	return newSETNX(client, v, false, time.Now)
}

func newSETNX(client redis.UniversalClient, v Variant, ownsClient bool, now func() time.Time) dlock.Locker {
	if _, err := ParseVariant(string(v)); err != nil {
		panic(err)
	}
	d := &setnxDriver{c: client, variant: v, now: now, ownsClient: ownsClient}
	return dlock.New(d, driver.Info{Name: string(v), MinTTL: MinTTL})
}

type setnxDriver struct {
	c       redis.UniversalClient
	variant Variant
	// now is the clock SETNXGetSet trusts: its expiry times are this clock's. Always
	// time.Now outside this package's tests, which skew it for one client.
	now        func() time.Time
	ownsClient bool
}

func (d *setnxDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	if d.variant == SETNXExpire {
		return d.tryExpire(ctx, key, ttl)
	}
	return d.tryGetSet(ctx, key, ttl)
}

// tryExpire is SETNX then EXPIRE (PEXPIRE, for millisecond TTLs): two commands.
func (d *setnxDriver) tryExpire(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	value := redisops.NewValue()
	ok, err := d.setnx(ctx, key, value)
	if err != nil {
		if !redisops.IsReply(err) {
			d.undo(key, value)
		}
		return nil, err
	}
	if !ok {
		return nil, driver.Busy(0)
	}
	// A client that dies here has set a lock that never expires.
	if err := d.c.PExpire(ctx, key, time.Duration(redisops.Millis(ttl))*time.Millisecond).Err(); err != nil {
		d.undo(key, value) // a living client can still take its lock back
		return nil, err
	}
	return &setnxLock{d: d, key: key}, nil
}

// tryGetSet is SETNX key <expiry>, and on failure GET, compare with the local clock,
// GETSET.
func (d *setnxDriver) tryGetSet(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	now := d.now().UnixMilli()
	value := strconv.FormatInt(now+redisops.Millis(ttl), 10)
	ok, err := d.setnx(ctx, key, value)
	if err != nil {
		if !redisops.IsReply(err) {
			d.undo(key, value)
		}
		return nil, err
	}
	if ok {
		return &setnxLock{d: d, key: key}, nil
	}
	seen, err := d.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil, driver.Busy(0) // released meanwhile: look again
	} else if err != nil {
		return nil, err
	}
	expires, err := strconv.ParseInt(seen, 10, 64)
	if err != nil {
		return nil, driver.Busy(0) // not an expiry time: a lock this algorithm cannot judge
	}
	if expires >= now {
		return nil, driver.Busy(time.Duration(expires-now+1) * time.Millisecond)
	}
	// Expired by this client's clock: take it over. The loser of a race here has
	// still overwritten the winner's expiry time with its own.
	old, err := d.c.GetSet(ctx, key, value).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if old != seen {
		return nil, driver.Busy(0)
	}
	return &setnxLock{d: d, key: key}, nil
}

// setnx sends the SETNX command itself (go-redis's SetNX sends SET NX).
func (d *setnxDriver) setnx(ctx context.Context, key, value string) (bool, error) {
	return d.c.Do(ctx, "SETNX", key, value).Bool()
}

// undo deletes key if it still holds value, best effort, with a fresh context: a
// SETNX whose reply was lost, or an EXPIRE that failed, must not leave a lock behind.
func (d *setnxDriver) undo(key, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = redisops.Release(ctx, d.c, key, value)
}

func (d *setnxDriver) Close() error {
	if d.ownsClient {
		return d.c.Close()
	}
	return nil
}

// setnxLock is one grant; release is a bare DEL, whoever holds the key.
type setnxLock struct {
	d   *setnxDriver
	key string
}

func (l *setnxLock) Token() uint64 { return 0 }

func (l *setnxLock) Refresh(context.Context, time.Duration) error {
	return fmt.Errorf("%s has no refresh: %w", l.d.variant, errors.ErrUnsupported)
}

func (l *setnxLock) Unlock(ctx context.Context) error {
	n, err := l.d.c.Del(ctx, l.key).Result()
	if err != nil {
		return err
	}
	if n == 0 {
		return dlock.ErrNotHeld
	}
	return nil
}
