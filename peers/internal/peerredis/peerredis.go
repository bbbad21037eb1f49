// Package peerredis opens the Redis clients of the Redis peers' URLs (kept apart from
// peerurl so that the other peers do not import a Redis client).
package peerredis

import (
	"context"
	"errors"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Clients makes one client per host of a redis-style URL,
// scheme://[user:password@]h1:port[,h2:port,…][/db], pings them all (failing unless
// all answer) and returns them with a function that closes them. max > 0 limits the
// number of hosts.
func Clients(ctx context.Context, u *url.URL, max int) ([]redis.UniversalClient, func() error, error) {
	hosts, err := peerurl.Hosts(u)
	if err != nil {
		return nil, nil, err
	}
	if max > 0 && len(hosts) > max {
		return nil, nil, peerurl.OneHost(u)
	}
	db, err := peerurl.RedisDB(u)
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
