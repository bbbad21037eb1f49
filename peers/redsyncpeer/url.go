package redsyncpeer

import (
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerredis"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+redsync://[user:password@]h1:port[,h2:port,…][/db], one host per independent
// master. It takes no query parameters. The opener pings every master and fails
// unless all answer; the Locker's Close closes the clients it made.
const Scheme = "peer+redsync"

// The declaration: owner-checked release and refresh by a random value; no fencing.
// redsync's own timing (drift, retry delay) wants TTLs from MinTTL.
func init() {
	peerredis.Register(Scheme, 0, func(c []redis.UniversalClient) dlock.Locker { return New(c) },
		spec.Capabilities{PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL})
}
