package zkpeer

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+zk://h1:2181[,h2:2181,…][/root]?session_timeout=10s. The path, if any, is the
// root (WithRoot, default DefaultRoot); session_timeout is a Go duration (default
// 10s). The Locker's Close closes the session.
const Scheme = "peer+zk"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u, "session_timeout"); err != nil {
			return nil, err
		}
		hosts, err := peerurl.Hosts(u)
		if err != nil {
			return nil, err
		}
		timeout := 10 * time.Second
		if s := u.Query().Get("session_timeout"); s != "" {
			if timeout, err = time.ParseDuration(s); err != nil || timeout <= 0 {
				return nil, fmt.Errorf("%w: session_timeout=%q: want a positive Go duration such as 10s", dlock.ErrInvalidURL, s)
			}
		}
		var opts []Option
		if u.Path != "" && u.Path != "/" {
			opts = append(opts, WithRoot(u.Path))
		}
		return Connect(hosts, timeout, opts...)
	})
}
