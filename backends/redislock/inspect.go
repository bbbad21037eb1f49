package redislock

import (
	"cmp"
	"context"
	"net/url"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/backends/internal/redisops"
	"github.com/dlock-go/dlock/spec"
)

// inspect reads the configuration of the deployment u names: of its one server, of
// the master its Sentinels name, or of every master of its Cluster (see
// redisops.Inspect).
func inspect(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	r, c, err := connect(ctx, u)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	o := redisops.InspectOptions{Replication: true, WaitReplicas: r.ack}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return redisops.Inspect(ctx, c, o), nil
	}
	var mu sync.Mutex
	var fs []spec.Finding
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		o := o
		o.Node = n.Options().Addr
		found := redisops.Inspect(ctx, n, o)
		mu.Lock()
		fs = append(fs, found...)
		mu.Unlock()
		return nil
	})
	slices.SortStableFunc(fs, func(a, b spec.Finding) int { return cmp.Compare(a.Setting, b.Setting) })
	return fs, err
}
