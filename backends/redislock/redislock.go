// Package redislock is the Redis backend of dlock, in two flavours.
//
// New is the safe single-deployment lock: SET NX PX with a random 128-bit owner value,
// owner-checked refresh and release in Lua, a fencing token from a per-key counter,
// and waiters that queue in the store, each woken by a pub/sub message of its own
// when its turn comes: a release wakes one waiter, however many wait. A caller may
// take a free lock ahead of waiters that arrived less than DefaultBargeWindow ago
// (the holder that releases and asks again keeps going without a hand-off), never
// ahead of one that has waited longer, so no waiter starves. It works with any
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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/driver"
)

// Option configures New.
type Option func(*config)

type config struct {
	fifo        bool
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
// WAIT counts whole milliseconds and takes 0 to mean "for ever": a timeout below 1ms
// is raised to 1ms, so that WAIT never blocks without a bound.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) { c.ackReplicas, c.ackTimeout = replicas, max(timeout, time.Millisecond) }
}

// WithFIFO turns the fair mode on or off. In both modes the store keeps a queue of
// waiting Acquires per key (in the lock key's hash slot: queueKey) and a release
// wakes the first waiter alone. The fair mode grants the lock in strict arrival
// order: a TryAcquire fails while anyone waits, and a holder that releases and asks
// again queues behind the waiters. The default mode lets a caller past waiters that
// arrived less than DefaultBargeWindow ago (more grants, fewer hand-offs; a wait
// still bounded). Each waiter renews
// its place every third of its TTL; a waiter that stops (a crashed process) is
// dropped when its TTL runs out, so it delays the others by at most that. A release
// names the next waiter on the release channel; a waiter also looks again at each
// renewal and when the holder's TTL runs out, so a lost message delays it by at most
// a third of its TTL. Acquire with WithRetry retries TryAcquire instead of queueing
// (no order; while others wait it is not granted).
//
// Cost: the same round trips and scripts in both modes (one to acquire, one to
// release when uncontended). Clients in either mode exclude each other on a key
// (TestMixedModesExclude), but only the fair mode's clients keep the order.
func WithFIFO(on bool) Option {
	return func(c *config) { c.fifo = on }
}

// MinTTL is the shortest TTL a Locker accepts: Redis counts PX in milliseconds.
const MinTTL = time.Millisecond

// New returns a Locker that takes locks with SET NX PX on client (see the package
// doc). Locks from it and from any library that uses SET key value NX PX on the same
// key name exclude each other. Tokens come from a per-key counter that never expires
// (one small key per lock name ever used; see redisops.FenceKey for the layout).
// Closing the Locker does not close client.
//
// Give a client with ContextTimeoutEnabled (as the redis:// opener does): without it
// go-redis ignores context deadlines on the socket, and a call to a server that stops
// answering (Release, Refresh, a renewal) outlives its context by up to the client's
// ReadTimeout.
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
	info := driver.Info{Name: "redis", MinTTL: MinTTL}
	window := DefaultBargeWindow
	if c.fifo {
		window = 0
	}
	return dlock.New(fairDriver{d, window}, info)
}
