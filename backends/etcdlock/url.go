package etcdlock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// etcd://[user:password@]host1:2379,host2:2379/prefix (default prefix DefaultPrefix),
// a Locker on a new client that its Close closes.
const Scheme = "etcd"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// parseURL returns the endpoints of u.
func parseURL(u *url.URL) ([]string, error) {
	if _, err := dlock.ParseQuery(u); err != nil {
		return nil, err
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs host:port[,host:port...]", dlock.ErrInvalidURL, Scheme)
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return nil, fmt.Errorf("%w: %s:// has an empty host in its host list", dlock.ErrInvalidURL, Scheme)
		}
		eps = append(eps, h)
	}
	return eps, nil
}

// declare: fencing by create revision, per-lease TTLs (etcd leases, whole seconds,
// MinTTL), refresh, waiters queued by revision (FIFO). Raft keeps every lock through
// a member's restart and a leader's death. Elections are the same queue
// (election.go, etcd's concurrency.Election layout); a set of keys is one
// transaction (multi.go), its revision each key's token.
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: true,
		Election: &spec.Primitive{Native: true, Fencing: true, FIFO: true}, MultiKey: &spec.Primitive{Native: true, Fencing: true}}, nil
}

// open is the URL opener: etcd://[user:pass@]host1:2379,host2:2379/prefix.
func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	eps, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	// The client's Context bounds its whole life: it must outlive ctx.
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Context: context.WithoutCancel(ctx), Logger: zap.NewNop()}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("dlock: etcd: connect %s: %w", u.Host, err)
	}
	if _, err := cli.Status(ctx, eps[0]); err != nil && !anyReachable(ctx, cli, eps[1:]) {
		cli.Close()
		return nil, fmt.Errorf("dlock: etcd: %s: %w", u.Host, err)
	}
	return New(cli, WithPrefix(u.Path), withOwnClient()), nil
}

func anyReachable(ctx context.Context, cli *clientv3.Client, eps []string) bool {
	for _, ep := range eps {
		if _, err := cli.Status(ctx, ep); err == nil {
			return true
		}
	}
	return false
}
