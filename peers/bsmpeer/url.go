package bsmpeer

import (
	"context"
	"net/url"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerredis"
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
		clients, closeAll, err := peerredis.Clients(ctx, u, 1)
		if err != nil {
			return nil, err
		}
		return peerurl.Owning(New(clients[0]), closeAll), nil
	})
}
