package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// cleanupTimeout bounds the owner-checked release that undoes a grant whose reply
// was lost or that will not be used.
const cleanupTimeout = 2 * time.Second

type redisDriver struct {
	c        redis.UniversalClient
	cfg      config
	releases *redisops.Releases
}

func (d *redisDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	value := redisops.NewOwner(ctx)
	var token uint64
	var remaining time.Duration
	var ok bool
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		token, remaining, ok, err = redisops.Acquire(ctx, s, key, value, ttl)
		return ok, err
	})
	if err != nil {
		if ok || !redisops.IsReply(err) {
			// Granted but not acknowledged, or no reply: the lock may be set. Undo it.
			d.cleanup(key, value)
		}
		return nil, err
	}
	if !ok {
		return nil, driver.Busy(remaining)
	}
	return &redisLock{d: d, key: key, value: value, token: token}, nil
}

// cleanup releases key if it still holds value, best effort, with a fresh context.
func (d *redisDriver) cleanup(key, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = redisops.Release(ctx, d.c, key, value)
}

// write runs op, a script that writes key; with WithReplicaAck, and when op reports
// that it wrote, it then waits for the replicas on the same connection.
// refresh runs a refresh script (its answer: whether the lease was still ours)
// through write on key's server: ErrNotHeld when it was not.
func (d *redisDriver) refresh(ctx context.Context, key string, script func(redis.Scripter) (bool, error)) error {
	var ok bool
	err := d.write(ctx, key, func(s redis.Scripter) (bool, error) {
		var err error
		ok, err = script(s)
		return ok, err
	})
	return heldUnless(ok, err)
}

// heldUnless turns a script's answer into Refresh's and Unlock's error: err, or
// ErrNotHeld when the lease was not ours (ok false).
func heldUnless(ok bool, err error) error {
	if err == nil && !ok {
		return dlock.ErrNotHeld
	}
	return err
}

func (d *redisDriver) write(ctx context.Context, key string, op func(redis.Scripter) (bool, error)) error {
	if d.cfg.ackReplicas <= 0 {
		_, err := op(d.c)
		return err
	}
	var node *redis.Client
	switch c := d.c.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, redisops.LockKey(key)); err != nil {
			return err
		}
	default:
		return fmt.Errorf("WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", d.c)
	}
	conn := node.Conn()
	defer conn.Close()
	wrote, err := op(conn)
	if err != nil || !wrote {
		return err
	}
	n, err := conn.Wait(ctx, d.cfg.ackReplicas, d.cfg.ackTimeout).Result()
	if err != nil {
		return fmt.Errorf("WAIT %d %v: %w", d.cfg.ackReplicas, d.cfg.ackTimeout, err)
	}
	if int(n) < d.cfg.ackReplicas {
		return fmt.Errorf("%w: %d of %d replicas acknowledged the write of %q within %v",
			dlock.ErrUnavailable, n, d.cfg.ackReplicas, key, d.cfg.ackTimeout)
	}
	return nil
}

func (d *redisDriver) Subscribe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.releases.Subscribe(ctx, key)
}

func (d *redisDriver) Close() error {
	err := d.releases.Close()
	if d.cfg.ownsClient {
		if cerr := d.c.Close(); cerr != nil {
			return cerr
		}
	}
	return err
}

// redisLock is one grant; the owner value identifies it on the server.
type redisLock struct {
	d          *redisDriver
	key, value string
	token      uint64
	fair       *fairCall // granted by fair.lua: the command its release runs
	// validFrom is when the request that granted the lock was sent (fair mode: a
	// waiter's grant comes long after its Acquire began).
	validFrom time.Time
}

// ValidFrom is when the request that granted the lock was sent (driver.ValidFrom).
func (l *redisLock) ValidFrom() time.Time { return l.validFrom }

func (l *redisLock) Token() uint64 { return l.token }

func (l *redisLock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.d.refresh(ctx, l.key, func(s redis.Scripter) (bool, error) {
		return redisops.Refresh(ctx, s, l.key, l.value, ttl)
	})
}

func (l *redisLock) Unlock(ctx context.Context) error {
	if l.fair != nil {
		return heldUnless(l.fair.unlock(ctx, l.d.c, false))
	}
	return heldUnless(redisops.Release(ctx, l.d.c, l.key, l.value))
}
