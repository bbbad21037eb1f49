// Package peerurl holds what the peers' URL openers share: the host list of a URL,
// a Redis database number from its path, and a Locker that closes the clients its
// opener made.
package peerurl

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/dlock-go/dlock"
)

// Hosts returns the comma-separated host:port list of u, or an error wrapping
// dlock.ErrInvalidURL that names the bad entry.
func Hosts(u *url.URL) ([]string, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs host:port[,host:port…]", dlock.ErrInvalidURL, u.Scheme)
	}
	hosts := strings.Split(u.Host, ",")
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, fmt.Errorf("%w: %s: host %q: want host:port", dlock.ErrInvalidURL, u.Scheme, h)
		}
	}
	return hosts, nil
}

// Host returns the one host:port of u, or an error wrapping dlock.ErrInvalidURL.
func Host(u *url.URL) (string, error) {
	hosts, err := Hosts(u)
	if err != nil {
		return "", err
	}
	if len(hosts) != 1 {
		return "", OneHost(u)
	}
	return hosts[0], nil
}

// RedisDB returns the database number in u's path (0 when there is none).
func RedisDB(u *url.URL) (int, error) {
	p := strings.Trim(u.Path, "/")
	if p == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: %s: path %q: want a database number", dlock.ErrInvalidURL, u.Scheme, u.Path)
	}
	return n, nil
}

// Owning returns l whose Close also runs closeClients (once, after l's own Close):
// the opener made the clients, so the Locker it returns owns them.
func Owning(l dlock.Locker, closeClients func() error) dlock.Locker {
	return &owning{Locker: l, closeClients: closeClients}
}

type owning struct {
	dlock.Locker
	closeClients func() error
	once         sync.Once
	err          error
}

// Unwrap returns the Locker whose clients o owns.
func (o *owning) Unwrap() dlock.Locker { return o.Locker }

func (o *owning) Close() error {
	o.once.Do(func() {
		err := o.Locker.Close()
		if cerr := o.closeClients(); err == nil && cerr != nil {
			err = fmt.Errorf("dlock: closing the opener's clients: %w", cerr)
		}
		o.err = err
	})
	return o.err
}

// Ping checks with ping that a freshly opened client answers, and closes it with
// closeClients when it does not. It returns by the end of ctx even when ping does
// not (a client that ignores its context's deadline): closing the clients then ends
// the ping.
func Ping(ctx context.Context, scheme string, ping func(context.Context) error, closeClients func() error) error {
	done := make(chan error, 1)
	go func() { done <- ping(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = closeClients()
		return fmt.Errorf("%w: %s: %w", dlock.ErrUnavailable, scheme, err)
	}
	return nil
}

// OneHost is the error of a URL that names several hosts where one is wanted.
func OneHost(u *url.URL) error {
	return fmt.Errorf("%w: %s takes one host:port, got %q", dlock.ErrInvalidURL, u.Scheme, u.Host)
}
