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
)

// Scheme is the URL scheme of New: redis://[user:password@]host:port[/db], or a comma
// list of hosts (redis://h1:6379,h2:6379) for a Redis Cluster client. Query
// parameters: wait_replicas=N and wait_timeout=D (a Go duration, default 100ms) turn
// on WithReplicaAck.
const Scheme = "redis"

// SchemeSETNX is the URL scheme of NewSETNX: redis+setnx://host:port[/db]?variant=V
// with V one of expire, getset (required). Hosts are as for Scheme.
const SchemeSETNX = "redis+setnx"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u, "wait_replicas", "wait_timeout"); err != nil {
			return nil, err
		}
		q := u.Query()
		var opts []Option
		if s := q.Get("wait_replicas"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%w: wait_replicas=%q: want a number of replicas", dlock.ErrInvalidURL, s)
			}
			timeout := 100 * time.Millisecond
			if s := q.Get("wait_timeout"); s != "" {
				if timeout, err = time.ParseDuration(s); err != nil || timeout < 0 {
					return nil, fmt.Errorf("%w: wait_timeout=%q: want a Go duration such as 100ms", dlock.ErrInvalidURL, s)
				}
			}
			opts = append(opts, WithReplicaAck(n, timeout))
		} else if q.Has("wait_timeout") {
			return nil, fmt.Errorf("%w: wait_timeout needs wait_replicas", dlock.ErrInvalidURL)
		}
		c, err := dial(ctx, u)
		if err != nil {
			return nil, err
		}
		return New(c, append(opts, func(c *config) { c.ownsClient = true })...), nil
	})
	dlock.Register(SchemeSETNX, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u, "variant"); err != nil {
			return nil, err
		}
		v, err := ParseVariant(u.Query().Get("variant"))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
		}
		c, err := dial(ctx, u)
		if err != nil {
			return nil, err
		}
		return newSETNX(c, v, true, time.Now), nil
	})
}

// dial makes a client for u's hosts and checks that it answers PING.
func dial(ctx context.Context, u *url.URL) (redis.UniversalClient, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs host:port", dlock.ErrInvalidURL, u.Scheme)
	}
	hosts := strings.Split(u.Host, ",")
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: path %q: want a database number", dlock.ErrInvalidURL, u.Path)
		}
		db = n
	}
	if len(hosts) > 1 && db != 0 {
		return nil, fmt.Errorf("%w: Redis Cluster (several hosts) has only database 0", dlock.ErrInvalidURL)
	}
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, fmt.Errorf("%w: host %q: want host:port", dlock.ErrInvalidURL, h)
		}
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: hosts, DB: db, Username: user, Password: pass})
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redislock: %s: PING: %w", strings.Join(hosts, ","), err)
	}
	return c, nil
}
