// Package peerredis opens the Redis clients of the Redis peers' URLs (kept apart from
// peerurl so that the other peers do not import a Redis client).
package peerredis

import (
	"context"
	"errors"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"

	"github.com/dlock-go/dlock/lab/peers/internal/peerurl"
)

// Parse checks a redis-style URL, scheme://[user:password@]h1:port[,h2:port,…][/db]
// without query parameters, and returns its hosts and database number. max > 0
// limits the number of hosts.
func Parse(u *url.URL, max int) (hosts []string, db int, err error) {
	if _, err := dlock.ParseQuery(u); err != nil {
		return nil, 0, err
	}
	if hosts, err = peerurl.Hosts(u); err != nil {
		return nil, 0, err
	}
	if max > 0 && len(hosts) > max {
		return nil, 0, peerurl.OneHost(u)
	}
	db, err = peerurl.RedisDB(u)
	return hosts, db, err
}

// Clients makes one client per host of a redis-style URL,
// scheme://[user:password@]h1:port[,h2:port,…][/db], pings them all (failing unless
// all answer) and returns them with a function that closes them. max > 0 limits the
// number of hosts.
func Clients(ctx context.Context, u *url.URL, max int) ([]redis.UniversalClient, func() error, error) {
	hosts, db, err := Parse(u, max)
	if err != nil {
		return nil, nil, err
	}
	pass, _ := u.User.Password()
	clients := make([]redis.UniversalClient, len(hosts))
	for i, h := range hosts {
		clients[i] = redis.NewClient(&redis.Options{Addr: h, DB: db, Username: u.User.Username(), Password: pass})
	}
	closeAll := func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	pingAll := func(ctx context.Context) error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Ping(ctx).Err())
		}
		return errors.Join(errs...)
	}
	if err := peerurl.Ping(ctx, u.Scheme, pingAll, closeAll); err != nil {
		return nil, nil, err
	}
	return clients, closeAll, nil
}

// Register registers the URL scheme of a Redis peer: its opener makes one client per
// host (at most max, if max > 0), pings them, and returns newLocker's Locker, which
// closes the clients on Close; its declaration is declare(the number of hosts) for
// every URL Parse accepts.
func Register(scheme string, max int, newLocker func([]redis.UniversalClient) dlock.Locker, declare func(hosts int) spec.Capabilities) {
	dlock.Register(dlock.Scheme{
		Name: scheme,
		Open: func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
			clients, closeAll, err := Clients(ctx, u, max)
			if err != nil {
				return nil, err
			}
			return peerurl.Owning(newLocker(clients), closeAll), nil
		},
		Declare: func(u *url.URL) (spec.Capabilities, error) {
			hosts, _, err := Parse(u, max)
			if err != nil {
				return spec.Capabilities{}, err
			}
			return declare(len(hosts)), nil
		},
	})
}
