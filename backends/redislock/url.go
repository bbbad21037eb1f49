package redislock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme of New: redis://[user:password@]host:port[/db], or a comma
// list of hosts (redis://h1:6379,h2:6379) for a Redis Cluster client. Query
// parameters: wait_replicas=N and wait_timeout=D (a Go duration of at least 1ms,
// default 100ms) turn on WithReplicaAck; fifo=true (or false) turns the fair mode
// on (off): WithFIFO.
const Scheme = "redis"

// SchemeSETNX is the URL scheme of NewSETNX: redis+setnx://host:port[/db]?variant=V
// with V one of expire, getset (required). Hosts are as for Scheme.
const SchemeSETNX = "redis+setnx"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
	dlock.Register(dlock.Scheme{Name: SchemeSETNX, Open: openSETNX, Declare: declareSETNX})
}

// redisURL is a parsed redis:// or redis+setnx:// URL.
type redisURL struct {
	hosts      []string
	db         int
	user, pass string
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
	q, err := dlock.ParseQuery(u, known...)
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
	if len(r.hosts) > 1 && r.db != 0 {
		return r, fmt.Errorf("%w: Redis Cluster (several hosts) has only database 0", dlock.ErrInvalidURL)
	}
	r.user = u.User.Username()
	r.pass, _ = u.User.Password()
	if u.Scheme == SchemeSETNX {
		if r.variant, err = ParseVariant(q["variant"]); err != nil {
			return r, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
		}
		return r, nil
	}
	if s, ok := q["fifo"]; ok {
		if r.fifo, err = strconv.ParseBool(s); err != nil {
			return r, fmt.Errorf("%w: fifo=%q: want true or false", dlock.ErrInvalidURL, s)
		}
	}
	if s, ok := q["wait_replicas"]; ok {
		if r.ack, err = strconv.Atoi(s); err != nil || r.ack < 0 {
			return r, fmt.Errorf("%w: wait_replicas=%q: want a number of replicas", dlock.ErrInvalidURL, s)
		}
		r.ackTimeout = 100 * time.Millisecond
		if s, ok := q["wait_timeout"]; ok {
			// WAIT counts whole milliseconds and takes 0 for "for ever": below 1ms a
			// timeout would wait without end.
			if r.ackTimeout, err = time.ParseDuration(s); err != nil || r.ackTimeout < time.Millisecond {
				return r, fmt.Errorf("%w: wait_timeout=%q: want a Go duration of at least 1ms, such as 100ms", dlock.ErrInvalidURL, s)
			}
		}
	} else if _, ok := q["wait_timeout"]; ok {
		return r, fmt.Errorf("%w: wait_timeout needs wait_replicas", dlock.ErrInvalidURL)
	}
	return r, nil
}

// opener returns the opener of a scheme: parse, dial (the Locker closes the client),
// and make the Locker with newLocker.
func opener(newLocker func(c redis.UniversalClient, r redisURL) dlock.Locker) dlock.Opener {
	return func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		r, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		c, err := r.dial(ctx)
		if err != nil {
			return nil, err
		}
		return newLocker(c, r), nil
	}
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
// arrival order (FIFO). An empty server comes back from a
// restart without persistence (every lock gone), Redis expires keys by its wall
// clock (a clock jump frees them), and, without wait_replicas, a promoted replica may
// never have seen a lock.
func declare(u *url.URL) (spec.Capabilities, error) {
	r, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	c := spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: r.fifo,
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.ServerRestart: spec.Violated, spec.ClockJump: spec.Violated}}
	if r.ack < 1 {
		// A promoted replica that never saw the lock grants it again (Failover), and
		// its fencing counter missed the increment: it hands the same token out
		// again (FailoverFencing).
		c.FaultOutcomes[spec.Failover] = spec.Violated
		c.FaultOutcomes[spec.FailoverFencing] = spec.Violated
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
		ContextTimeoutEnabled: true})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redislock: %s: PING: %w", strings.Join(r.hosts, ","), err)
	}
	return c, nil
}
