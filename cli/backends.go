package cli

// The backends (and peers) whose URL schemes dlock understands. A blank import registers a
// package's schemes with dlock.Open.
import (
	_ "github.com/dlock-go/dlock/backends/etcdlock"
	_ "github.com/dlock-go/dlock/backends/memlock"
	_ "github.com/dlock-go/dlock/backends/mysqllock"
	_ "github.com/dlock-go/dlock/backends/redislock"
	_ "github.com/dlock-go/dlock/backends/redlock"
	_ "github.com/dlock-go/dlock/backends/zklock"

	// The peers (other libraries adapted to dlock.Locker) under peer+… schemes, so
	// that `dlock check` and `dlock run` can use them too.
	_ "github.com/dlock-go/dlock/peers/bsmpeer"
	_ "github.com/dlock-go/dlock/peers/etcdpeer"
	_ "github.com/dlock-go/dlock/peers/getlockpeer"
	_ "github.com/dlock-go/dlock/peers/redsyncpeer"
	_ "github.com/dlock-go/dlock/peers/zkpeer"

	"github.com/redis/go-redis/v9/logging"
)

func init() {
	// dlock reports a backend's errors itself; the Redis client's own log lines
	// ("failed to dial after 5 attempts") would only repeat them on stderr.
	logging.Disable()
}
