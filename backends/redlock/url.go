package redlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme of New: redlock://[user:password@]h1:port,h2:port,…[/db],
// one host per independent master (the same credentials, database number and TLS
// settings for all). Query parameters: node_timeout (a Go duration from 1ms to 1m;
// WithNodeTimeout), drift_factor (a number from 0 to 0.5, e.g. 0.01) and drift_fixed
// (a Go duration from 1ms to 1s, e.g. 2ms) for WithDrift (both or neither), and the TLS parameters of redis:// (tls, tls_ca,
// tls_cert, tls_key, tls_server_name; see docs/connecting.md).
//
// The opener refuses a host named twice. It pings every master in parallel and
// fails (wrapping dlock.ErrUnavailable) unless a majority answer within 2s; masters that are
// down are used as soon as they come back.
const Scheme = "redlock"

// openTimeout bounds each PING of the opener.
const openTimeout = 2 * time.Second

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare, Inspect: inspect})
}

// declare: per-lease TTLs and refresh, no fencing; the generic semaphore. A master that restarts without
// persistence forgets the locks it granted, so a second client can reach a majority
// while the first lease is live (ServerRestart); so does a lease that stands on a
// bare majority when one of its masters' clocks jumps (ClockJumpBareMajority,
// Kleppmann's counterexample). One master's clock jump under a lease held on all of
// them does not matter (ClockJump). Sets of keys are taken key by key (each key by
// quorum); there are no elections.
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL,
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.ServerRestart: spec.Violated, spec.ClockJumpBareMajority: spec.Violated},
		// The generic semaphore: slots of Redlock mutexes; limits are not compared.
		Semaphore: &spec.Primitive{Native: false, Weaknesses: []spec.Property{spec.SemaphoreConflict}},
		MultiKey:  &spec.Primitive{}}, nil
}

// redlockURL is a parsed redlock:// URL.
type redlockURL struct {
	opts       []Option
	hosts      []string
	db         int
	user, pass string
	tls        *tls.Config
}

// parseURL reads u: its options, masters, database number, credentials and TLS.
func parseURL(u *url.URL) (r redlockURL, err error) {
	q, err := dlock.ParseQuery(u, tlsurl.With("node_timeout", "drift_factor", "drift_fixed")...)
	if err != nil {
		return r, err
	}
	if r.opts, err = urlOptions(q); err != nil {
		return r, err
	}
	if r.hosts, r.db, err = urlHosts(u); err != nil {
		return r, err
	}
	if r.tls, err = tlsurl.Config(q, false); err != nil {
		return r, err
	}
	r.user = u.User.Username()
	r.pass, _ = u.User.Password()
	return r, nil
}

// dial makes one client per master. ContextTimeoutEnabled: the per-node timeout (a
// ctx deadline) ends the socket read too, so that no request to a hung master
// outlives it.
func (r redlockURL) dial() []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(r.hosts))
	for i, h := range r.hosts {
		clients[i] = redis.NewClient(&redis.Options{Addr: h, DB: r.db, Username: r.user, Password: r.pass, TLSConfig: r.tls,
			ContextTimeoutEnabled: true})
	}
	return clients
}

func closeClients(clients []redis.UniversalClient) {
	for _, c := range clients {
		c.Close()
	}
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	r, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	clients := r.dial()
	if err := pingMajority(ctx, r.hosts, clients); err != nil {
		closeClients(clients)
		return nil, err
	}
	return New(clients, append(r.opts, func(c *config) { c.ownsClients = true })...), nil
}

// inspect reads the configuration of every master (redisops.Inspect): persistence
// and eviction matter on each; their replicas play no part in the algorithm.
func inspect(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	r, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	clients := r.dial()
	defer closeClients(clients)
	if err := pingMajority(ctx, r.hosts, clients); err != nil {
		return nil, err
	}
	var fs []spec.Finding
	for i, c := range clients {
		fs = append(fs, redisops.Inspect(ctx, c, redisops.InspectOptions{Node: r.hosts[i]})...)
	}
	return fs, nil
}

// The bounds of the query parameters. A node timeout below 1ms is below any
// round trip (every request would fail), and beyond a minute a hung master stalls
// each attempt that long. Redis expires keys to the millisecond, so the fixed drift
// is at least 1ms (with drift_factor=0 the allowance would otherwise be nothing);
// above a second it is no drift: ask for a longer TTL. A drift factor above a half
// gives up most of every lease.
const (
	minNodeTimeout = time.Millisecond
	maxNodeTimeout = time.Minute
	maxDriftFactor = 0.5
	minDriftFixed  = time.Millisecond
	maxDriftFixed  = time.Second
)

func urlOptions(q dlock.Query) ([]Option, error) {
	var opts []Option
	if _, ok := q["node_timeout"]; ok {
		d, err := q.Duration("node_timeout", 0, minNodeTimeout, maxNodeTimeout)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithNodeTimeout(d))
	}
	_, hasFactor := q["drift_factor"]
	_, hasFixed := q["drift_fixed"]
	if hasFactor != hasFixed {
		return nil, fmt.Errorf("%w: drift_factor and drift_fixed go together", dlock.ErrInvalidURL)
	}
	if hasFactor {
		f, err := q.Float("drift_factor", 0, 0, maxDriftFactor)
		if err != nil {
			return nil, err
		}
		fixed, err := q.Duration("drift_fixed", 0, minDriftFixed, maxDriftFixed)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithDrift(f, fixed))
	}
	return opts, nil
}

// urlHosts returns the masters' addresses and the database number of u.
func urlHosts(u *url.URL) ([]string, int, error) {
	if u.Host == "" {
		return nil, 0, fmt.Errorf("%w: redlock:// needs host:port,host:port,…", dlock.ErrInvalidURL)
	}
	hosts := strings.Split(u.Host, ",")
	seen := map[string]bool{}
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, 0, fmt.Errorf("%w: host %q: want host:port", dlock.ErrInvalidURL, h)
		}
		if seen[h] {
			return nil, 0, fmt.Errorf("%w: host %q named twice: Redlock needs independent masters", dlock.ErrInvalidURL, h)
		}
		seen[h] = true
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, 0, fmt.Errorf("%w: path %q: want a database number", dlock.ErrInvalidURL, u.Path)
		}
		db = n
	}
	return hosts, db, nil
}

// pingMajority pings every master in parallel and fails unless a majority answer.
func pingMajority(ctx context.Context, hosts []string, clients []redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ping(ctx).Err()
		}()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, hosts[i]+": "+err.Error())
		}
	}
	if len(failed) > len(hosts)-(len(hosts)/2+1) {
		return fmt.Errorf("%w: redlock: %d of %d masters did not answer PING: %s",
			dlock.ErrUnavailable, len(failed), len(hosts), strings.Join(failed, "; "))
	}
	return nil
}
