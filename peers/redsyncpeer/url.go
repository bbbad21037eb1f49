package redsyncpeer

import (
	"context"
	"errors"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+redsync://[user:password@]h1:port[,h2:port,…][/db], one host per independent
// master. It takes no query parameters. The opener pings every master and fails
// unless all answer; the Locker's Close closes the clients it made.
const Scheme = "peer+redsync"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u); err != nil {
			return nil, err
		}
		hosts, err := peerurl.Hosts(u)
		if err != nil {
			return nil, err
		}
		db, err := peerurl.RedisDB(u)
		if err != nil {
			return nil, err
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
		if err := peerurl.Ping(ctx, Scheme, pingAll, closeAll); err != nil {
			return nil, err
		}
		return peerurl.Owning(New(clients), closeAll), nil
	})
}
