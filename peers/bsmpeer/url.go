package bsmpeer

import (
	"context"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+bsm://[user:password@]host:port[/db]. It takes no query parameters. The
// opener pings the server; the Locker's Close closes the client it made.
const Scheme = "peer+bsm"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u); err != nil {
			return nil, err
		}
		hosts, err := peerurl.Hosts(u)
		if err != nil {
			return nil, err
		}
		if len(hosts) != 1 {
			return nil, peerurl.OneHost(u)
		}
		db, err := peerurl.RedisDB(u)
		if err != nil {
			return nil, err
		}
		pass, _ := u.User.Password()
		c := redis.NewClient(&redis.Options{Addr: hosts[0], DB: db, Username: u.User.Username(), Password: pass})
		if err := peerurl.Ping(ctx, Scheme, func(ctx context.Context) error { return c.Ping(ctx).Err() }, c.Close); err != nil {
			return nil, err
		}
		return peerurl.Owning(New(c), c.Close), nil
	})
}
