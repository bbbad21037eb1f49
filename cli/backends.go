package cli

// The backends whose URL schemes dlock understands. A blank import registers a
// package's schemes with dlock.Open. The peers (other libraries adapted to
// dlock.Locker, peer+… schemes) are the lab's: dlock-lab registers them.
import (
	_ "github.com/dlock-go/dlock/backends/all"

	"github.com/redis/go-redis/v9/logging"
)

func init() {
	// dlock reports a backend's errors itself; the Redis client's own log lines
	// ("failed to dial after 5 attempts") would only repeat them on stderr.
	logging.Disable()
}
