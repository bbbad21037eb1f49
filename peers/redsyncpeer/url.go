package redsyncpeer

import (
	"context"
	"net/url"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerredis"
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
		clients, closeAll, err := peerredis.Clients(ctx, u, 0)
		if err != nil {
			return nil, err
		}
		return peerurl.Owning(New(clients), closeAll), nil
	})
}
