package redislock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme of New:
// redis://[user:password@]host:port[/db][?params]. Several hosts
// (redis://h1:6379,h2:6379) or cluster=true make a Redis Cluster client (database 0
// only); sentinel_master=NAME makes the hosts Sentinels, and the client follows the
// master they name through failovers. Query parameters (none required):
//
//	wait_replicas=N, wait_timeout=D   WithReplicaAck (N 0 to 100; D a Go duration, 1ms to 1m, default 100ms)
//	fifo=true|false                   the fair mode, WithFIFO (default false)
//	cluster=true|false                Redis Cluster with one seed host (default: several hosts)
//	sentinel_master=NAME              the master's name at the Sentinels the hosts are
//	tls, tls_ca, tls_cert, tls_key, tls_server_name   TLS (see docs/connecting.md)
//
// The user name and password authenticate to the data nodes (an ACL user, or only a
// password for requirepass), not to the Sentinels.
const Scheme = "redis"

// SchemeTLS is Scheme over TLS: rediss://… is redis://…?tls=true, trusting the
// system's roots unless tls_ca says otherwise.
const SchemeTLS = "rediss"

// SchemeSETNX is the URL scheme of NewSETNX: redis+setnx://host:port[/db]?variant=V
// with V one of expire, getset (required). Hosts, cluster, sentinel_master,
// credentials and TLS are as for Scheme.
const SchemeSETNX = "redis+setnx"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare, Inspect: inspect})
	dlock.Register(dlock.Scheme{Name: SchemeTLS, Open: open, Declare: declare, Inspect: inspect})
	dlock.Register(dlock.Scheme{Name: SchemeSETNX, Open: openSETNX, Declare: declareSETNX})
}

// redisURL is a parsed redis://, rediss:// or redis+setnx:// URL.
type redisURL struct {
	hosts      []string
	db         int
	user, pass string
	tls        *tls.Config
	cluster    bool          // a Cluster client
	master     string        // sentinel_master: the hosts are Sentinels
	ack        int           // wait_replicas
	fifo       bool          // fifo (WithFIFO)
	ackTimeout time.Duration // wait_timeout
	variant    Variant       // redis+setnx only
}

func parseURL(u *url.URL) (redisURL, error) {
	var r redisURL
	known := []string{"wait_replicas", "wait_timeout", "fifo"}
	if u.Scheme == SchemeSETNX {
		known = []string{"variant"}
	}
	q, err := dlock.ParseQuery(u, tlsurl.With(append(known, "cluster", "sentinel_master")...)...)
	if err != nil {
		return r, err
	}
	if u.Host == "" {
		return r, fmt.Errorf("%w: %s:// needs host:port", dlock.ErrInvalidURL, u.Scheme)
	}
	r.hosts = strings.Split(u.Host, ",")
	for _, h := range r.hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return r, fmt.Errorf("%w: host %q: want host:port", dlock.ErrInvalidURL, h)
		}
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return r, fmt.Errorf("%w: path %q: want a database number", dlock.ErrInvalidURL, u.Path)
		}
		r.db = n
	}
	if err := r.parseTopology(q); err != nil {
		return r, err
	}
	if r.tls, err = tlsurl.Config(q, u.Scheme == SchemeTLS); err != nil {
		return r, err
	}
	r.user = u.User.Username()
	r.pass, _ = u.User.Password()
	if u.Scheme == SchemeSETNX {
		if r.variant, err = ParseVariant(q["variant"]); err != nil {
			return r, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
		}
		return r, nil
	}
	if r.fifo, err = q.Bool("fifo", false); err != nil {
		return r, err
	}
	if _, ok := q["wait_replicas"]; !ok {
		if _, ok := q["wait_timeout"]; ok {
			return r, fmt.Errorf("%w: wait_timeout needs wait_replicas", dlock.ErrInvalidURL)
		}
		return r, nil
	}
	if r.ack, err = q.Int("wait_replicas", 0, 0, maxWaitReplicas); err != nil {
		return r, err
	}
	r.ackTimeout, err = q.Duration("wait_timeout", 100*time.Millisecond, time.Millisecond, maxWaitTimeout)
	return r, err
}

// The bounds of wait_replicas and wait_timeout. WAIT counts whole milliseconds and
// takes 0 for "for ever": below 1ms a timeout would wait without end. Every grant
// waits up to wait_timeout for the replicas: beyond a minute a lost replica stalls
// each acquire longer than a lease's usual TTL. No deployment has 100 replicas, and
// more than are connected makes every grant fail.
const (
	maxWaitReplicas = 100
	maxWaitTimeout  = time.Minute
)

// parseTopology reads which kind of deployment the hosts are: one server, a
// Cluster (several hosts, or cluster=true) or Sentinels (sentinel_master).
func (r *redisURL) parseTopology(q map[string]string) error {
	r.master = q["sentinel_master"]
	if _, ok := q["sentinel_master"]; ok && r.master == "" {
		return fmt.Errorf("%w: sentinel_master is empty: want the master's name at the Sentinels", dlock.ErrInvalidURL)
	}
	switch c, set := q["cluster"]; {
	case !set:
		r.cluster = r.master == "" && len(r.hosts) > 1
	case c == "true":
		r.cluster = true
	case c == "false":
		if r.master == "" && len(r.hosts) > 1 {
			return fmt.Errorf("%w: cluster=false with several hosts: name one server, or name the Sentinels with sentinel_master", dlock.ErrInvalidURL)
		}
	default:
		return fmt.Errorf("%w: cluster=%q: want true or false", dlock.ErrInvalidURL, c)
	}
	if r.cluster && r.master != "" {
		return fmt.Errorf("%w: cluster=true and sentinel_master exclude each other", dlock.ErrInvalidURL)
	}
	if r.cluster && r.db != 0 {
		return fmt.Errorf("%w: Redis Cluster has only database 0", dlock.ErrInvalidURL)
	}
	return nil
}

// opener returns the opener of a scheme: parse, dial (the Locker closes the client),
// and make the Locker with newLocker.
func opener(newLocker func(c redis.UniversalClient, r redisURL) dlock.Locker) dlock.Opener {
	return func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		r, c, err := connect(ctx, u)
		if err != nil {
			return nil, err
		}
		return newLocker(c, r), nil
	}
}

// connect parses u and dials the client it names.
func connect(ctx context.Context, u *url.URL) (redisURL, redis.UniversalClient, error) {
	r, err := parseURL(u)
	if err != nil {
		return r, nil, err
	}
	c, err := r.dial(ctx)
	return r, c, err
}

var (
	open = opener(func(c redis.UniversalClient, r redisURL) dlock.Locker {
		return New(c, WithReplicaAck(r.ack, r.ackTimeout), WithFIFO(r.fifo), func(c *config) { c.ownsClient = true })
	})
	openSETNX = opener(func(c redis.UniversalClient, r redisURL) dlock.Locker {
		return newSETNX(c, r.variant, true, time.Now)
	})
)

// declare: fencing, per-lease TTLs, refresh, and with fifo=true a queue served in
// arrival order (FIFO); native semaphores and read-write locks, fenced, without
// queue (no writer preference); elections (election.go) and sets of keys in one
// script (multi.go; key by key across Redis Cluster slots). An empty server comes
// back from a
// restart without persistence (every lock gone), Redis expires keys by its wall
// clock (a clock jump frees them), and, without wait_replicas, a promoted replica may
// never have seen a lock.
func declare(u *url.URL) (spec.Capabilities, error) {
	r, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	c := spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: r.fifo,
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.ServerRestart: spec.Violated, spec.ClockJump: spec.Violated},
		// Native primitives, one script per operation; waiters poll (woken by
		// releases), so no order; a waiting writer keeps new readers out (LockRW).
		Semaphore: &spec.Primitive{Native: true, Fencing: true},
		RWLock:    &spec.Primitive{Native: true, Fencing: true, WriterPreference: true},
		Election:  &spec.Primitive{Native: true, Fencing: true},
		MultiKey:  &spec.Primitive{Native: true, Fencing: true}}
	if r.ack < 1 {
		// A promoted replica that never saw the lock grants it again (Failover), and
		// its fencing counter missed the increment: it hands the same token out
		// again (FailoverFencing).
		c.FaultOutcomes[spec.Failover] = spec.Violated
		c.FaultOutcomes[spec.FailoverFencing] = spec.Violated
	} else {
		// The failover scenarios need a grant while the replica lags, which the
		// acknowledgement refuses (TestReplicaAck): a trial could never be exercised.
		why := "WithReplicaAck grants nothing while the replica lags (the grant waits for its acknowledgement and fails with ErrUnavailable: TestReplicaAck), so these scenarios' failover, one that loses a grant, cannot happen; that an acknowledged grant survives a failover is not tested"
		c.Inapplicable = map[spec.Scenario]string{spec.Failover: why, spec.FailoverFencing: why, spec.FailoverFencedWrite: why}
	}
	return c, nil
}

// declareSETNX: the weaknesses of each classic algorithm (see Variant).
func declareSETNX(u *url.URL) (spec.Capabilities, error) {
	r, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	c := spec.Capabilities{PerLeaseTTL: true, MinTTL: MinTTL}
	switch r.variant {
	case SETNXExpire:
		// A holder that dies between SETNX and EXPIRE leaves a lock that never
		// expires; DEL frees whoever holds the key now.
		c.Weaknesses = []spec.Property{spec.DeadlockFreedom, spec.OwnerOnlyRelease}
		c.HarnessOnly = []spec.Property{spec.DeadlockFreedom}
	case SETNXGetSet:
		// A client whose clock runs ahead takes over a live lock; DEL frees whoever
		// holds the key now.
		c.Weaknesses = []spec.Property{spec.MutualExclusion, spec.OwnerOnlyRelease}
		c.HarnessOnly = []spec.Property{spec.MutualExclusion}
	}
	return c, nil
}

// dial makes a client for the hosts and checks that it answers PING. Context
// deadlines bound every call, socket reads included, so a hung server cannot hold a
// call past its context.
func (r redisURL) dial(ctx context.Context) (redis.UniversalClient, error) {
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: r.hosts, DB: r.db, Username: r.user, Password: r.pass,
		TLSConfig: r.tls, IsClusterMode: r.cluster, MasterName: r.master, ContextTimeoutEnabled: true})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redislock: %s: PING: %w", strings.Join(r.hosts, ","), err)
	}
	return c, nil
}
