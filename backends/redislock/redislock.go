// Package redislock is the Redis backend of dlock, in two flavours.
//
// New is the safe single-deployment lock: SET NX PX with a random 128-bit owner value,
// owner-checked refresh and release in Lua, a fencing token from a per-key counter,
// and waiters woken by a pub/sub message on release. It works with any
// redis.UniversalClient: a single node, Sentinel (a failover client) or Redis Cluster.
//
// NewSETNX implements the classic SETNX algorithms as the seed articles describe them,
// for comparison only: each breaks a lock property, and the conformance suite shows it.
//
// Neither survives an asynchronous-replication failover or a restart without
// persistence with mutual exclusion intact (a promoted replica or an empty restarted
// server grants a held lock again); WithReplicaAck narrows the first window, it does
// not close it. See docs/backends/redis.md.
package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/redisops"
)

// Option configures New.
type Option func(*config)

type config struct {
	ackReplicas int
	ackTimeout  time.Duration
	ownsClient  bool // Close closes the client (URL openers)
}

// WithReplicaAck makes every grant and every refresh wait, with WAIT replicas timeout
// on the connection that wrote it, until at least replicas replicas have
// acknowledged the write. A grant that fewer replicas acknowledged in time is
// released again and TryAcquire/Acquire fail with an error wrapping
// dlock.ErrUnavailable; such a refresh fails (the lease keeps its old deadline). Each
// acknowledged grant or refresh costs one more round trip.
//
// What it fixes: a failover to a replica that acknowledged the lock keeps the lock.
// What it does not: Redis replication stays asynchronous — WAIT does not make the
// write durable, a failover may still promote a replica that did not acknowledge (or
// that restarted and lost it), and a write that timed out may still have reached
// some replicas. It needs a *redis.Client (single node or Sentinel) or a
// *redis.ClusterClient; other clients fail every acquire. replicas <= 0 turns it off.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) { c.ackReplicas, c.ackTimeout = replicas, timeout }
}

// cleanupTimeout bounds the owner-checked release that undoes a grant whose reply
// was lost or that will not be used.
const cleanupTimeout = 2 * time.Second

// New returns a Locker that takes locks with SET NX PX on client (see the package
// doc). Locks from it and from any library that uses SET key value NX PX on the same
// key name exclude each other. Tokens come from a per-key counter that never expires
// (one small key per lock name ever used; see redisops.FenceKey for the layout).
// Closing the Locker does not close client.
//
// Not guaranteed: mutual exclusion across a failover of an asynchronous replica or a
// restart of a server without persistence; and, as for every lease, against a holder
// paused longer than its TTL (check the fencing token at the resource).
func New(client redis.UniversalClient, opts ...Option) dlock.Locker {
	var c config
	for _, o := range opts {
		o(&c)
	}
	d := &redisDriver{c: client, cfg: c, releases: redisops.NewReleases(client)}
	return dlock.New(d, driver.Info{Name: "redis", MinTTL: time.Millisecond})
}

type redisDriver struct {
	c        redis.UniversalClient
	cfg      config
	releases *redisops.Releases
}

func (d *redisDriver) TryLock(ctx context.Context, key string, ttl time.Duration) (driver.Lock, error) {
	value := redisops.NewValue()
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
		return fmt.Errorf("redislock: WithReplicaAck needs a *redis.Client or *redis.ClusterClient, not %T", d.c)
	}
	conn := node.Conn()
	defer conn.Close()
	wrote, err := op(conn)
	if err != nil || !wrote {
		return err
	}
	n, err := conn.Wait(ctx, d.cfg.ackReplicas, d.cfg.ackTimeout).Result()
	if err != nil {
		return fmt.Errorf("redislock: WAIT %d %v: %w", d.cfg.ackReplicas, d.cfg.ackTimeout, err)
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
}

func (l *redisLock) Token() uint64 { return l.token }

func (l *redisLock) Refresh(ctx context.Context, ttl time.Duration) error {
	var ok bool
	err := l.d.write(ctx, l.key, func(s redis.Scripter) (bool, error) {
		var err error
		ok, err = redisops.Refresh(ctx, s, l.key, l.value, ttl)
		return ok, err
	})
	if err != nil {
		return err
	}
	if !ok {
		return dlock.ErrNotHeld
	}
	return nil
}

func (l *redisLock) Unlock(ctx context.Context) error {
	ok, err := redisops.Release(ctx, l.d.c, l.key, l.value)
	if err != nil {
		return err
	}
	if !ok {
		return dlock.ErrNotHeld
	}
	return nil
}
