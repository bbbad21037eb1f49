package redsyncpeer

import (
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerredis"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+redsync://[user:password@]h1:port[,h2:port,…][/db], one host per independent
// master. It takes no query parameters. The opener pings every master and fails
// unless all answer; the Locker's Close closes the clients it made.
const Scheme = "peer+redsync"

// The declaration: owner-checked release and refresh by a random value; no fencing.
// redsync's own timing (drift, retry delay) wants TTLs from MinTTL. On several
// masters the votes of simultaneous tries can split so that none of them wins
// (SimultaneousTry: 4 of 40 bursts of 10 fresh clients on 5 masters).
func init() {
	peerredis.Register(Scheme, 0, func(c []redis.UniversalClient) dlock.Locker { return New(c) },
		func(hosts int) spec.Capabilities {
			c := spec.Capabilities{PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL}
			if hosts > 1 {
				c.Weaknesses = []spec.Property{spec.SimultaneousTry}
			}
			return c
		})
}
