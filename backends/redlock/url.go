package redlock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme of New: redlock://[user:password@]h1:port,h2:port,…[/db],
// one host per independent master (the same credentials and database number for all).
// Query parameters: node_timeout (a Go duration; WithNodeTimeout), drift_factor (a
// number, e.g. 0.01) and drift_fixed (a Go duration, e.g. 2ms) for WithDrift (both or
// neither).
//
// The opener refuses a host named twice. It pings every master in parallel and
// fails (wrapping dlock.ErrUnavailable) unless a majority answer within 2s; masters that are
// down are used as soon as they come back.
const Scheme = "redlock"

// openTimeout bounds each PING of the opener.
const openTimeout = 2 * time.Second

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// declare: per-lease TTLs and refresh, no fencing. A master that restarts without
// persistence forgets the locks it granted, so a second client can reach a majority
// while the first lease is live (ServerRestart). Sets of keys are taken key by key
// (each key by quorum); there are no elections.
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, _, _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, MultiKey: &spec.Primitive{},
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.ServerRestart: spec.Violated}}, nil
}

// parseURL returns the options, masters and database number of u.
func parseURL(u *url.URL) (opts []Option, hosts []string, db int, err error) {
	q, err := dlock.ParseQuery(u, "node_timeout", "drift_factor", "drift_fixed")
	if err != nil {
		return nil, nil, 0, err
	}
	if opts, err = urlOptions(q); err != nil {
		return nil, nil, 0, err
	}
	hosts, db, err = urlHosts(u)
	return opts, hosts, db, err
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	opts, hosts, db, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	user := u.User.Username()
	pass, _ := u.User.Password()
	clients := make([]redis.UniversalClient, len(hosts))
	for i, h := range hosts {
		// ContextTimeoutEnabled: the per-node timeout (a ctx deadline) ends the socket
		// read too, so that no request to a hung master outlives it.
		clients[i] = redis.NewClient(&redis.Options{Addr: h, DB: db, Username: user, Password: pass, ContextTimeoutEnabled: true})
	}
	if err := pingMajority(ctx, hosts, clients); err != nil {
		for _, c := range clients {
			c.Close()
		}
		return nil, err
	}
	return New(clients, append(opts, func(c *config) { c.ownsClients = true })...), nil
}

func urlOptions(q map[string]string) ([]Option, error) {
	var opts []Option
	if s, ok := q["node_timeout"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: node_timeout=%q: want a positive Go duration such as 50ms", dlock.ErrInvalidURL, s)
		}
		opts = append(opts, WithNodeTimeout(d))
	}
	factor, hasFactor := q["drift_factor"]
	fixedS, hasFixed := q["drift_fixed"]
	if hasFactor != hasFixed {
		return nil, fmt.Errorf("%w: drift_factor and drift_fixed go together", dlock.ErrInvalidURL)
	}
	if hasFactor {
		f, err := strconv.ParseFloat(factor, 64)
		if err != nil || f < 0 || f >= 1 {
			return nil, fmt.Errorf("%w: drift_factor=%q: want a number in [0, 1)", dlock.ErrInvalidURL, factor)
		}
		fixed, err := time.ParseDuration(fixedS)
		if err != nil || fixed < 0 {
			return nil, fmt.Errorf("%w: drift_fixed=%q: want a Go duration such as 2ms", dlock.ErrInvalidURL, fixedS)
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
