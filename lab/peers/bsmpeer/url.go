package bsmpeer

import (
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerredis"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+bsm://[user:password@]host:port[/db]. It takes no query parameters. The
// opener pings the server; the Locker's Close closes the client it made.
const Scheme = "peer+bsm"

// The declaration: owner-checked release and refresh by a random value; no fencing.
func init() {
	peerredis.Register(Scheme, 1, func(c []redis.UniversalClient) dlock.Locker { return New(c[0]) },
		func(int) spec.Capabilities { return spec.Capabilities{PerLeaseTTL: true, Refresh: true} })
}
