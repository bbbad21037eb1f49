package main

// Every backend, and every peer under its peer+… scheme, so that the lab's commands
// can open them by URL.
import (
	_ "github.com/dlock-go/dlock/backends/all"
	_ "github.com/dlock-go/dlock/lab/peers/bsmpeer"
	_ "github.com/dlock-go/dlock/lab/peers/etcdpeer"
	_ "github.com/dlock-go/dlock/lab/peers/getlockpeer"
	_ "github.com/dlock-go/dlock/lab/peers/pgadvisorypeer"
	_ "github.com/dlock-go/dlock/lab/peers/redsyncpeer"
	_ "github.com/dlock-go/dlock/lab/peers/zkpeer"

	"github.com/redis/go-redis/v9/logging"
)

func init() {
	// The lab reports a backend's errors itself; the Redis client's own log lines
	// would only repeat them on stderr.
	logging.Disable()
}
