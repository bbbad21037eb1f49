package etcdpeer

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/peers/internal/peerurl"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+etcd://h1:2379[,h2:2379,…][/prefix]?session_ttl=60. The path, if any, is the
// prefix (WithPrefix, with a trailing "/"); session_ttl is WithSessionTTL in seconds.
// The opener makes a client and the session; the Locker's Close closes both.
const Scheme = "peer+etcd"

func init() {
	dlock.Register(Scheme, func(ctx context.Context, u *url.URL) (dlock.Locker, error) {
		if err := dlock.CheckQuery(u, "session_ttl"); err != nil {
			return nil, err
		}
		hosts, err := peerurl.Hosts(u)
		if err != nil {
			return nil, err
		}
		opts := []Option{}
		if u.Path != "" && u.Path != "/" {
			opts = append(opts, WithPrefix(u.Path+"/"))
		}
		if s := u.Query().Get("session_ttl"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("%w: session_ttl=%q: want a positive number of seconds", dlock.ErrInvalidURL, s)
			}
			opts = append(opts, WithSessionTTL(n))
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: hosts, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("dlock: %s: %w", Scheme, err)
		}
		l, err := New(ctx, cli, opts...)
		if err != nil {
			_ = cli.Close()
			return nil, err
		}
		return peerurl.Owning(l, cli.Close), nil
	})
}
