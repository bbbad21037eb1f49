package etcdlock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// etcd://[user:password@]host1:2379,host2:2379/prefix (default prefix DefaultPrefix),
// a Locker on a new client that its Close closes. The user name and password log
// in to a cluster with authentication enabled. Query parameters: the TLS parameters
// (tls, tls_ca, tls_cert, tls_key, tls_server_name; see docs/connecting.md) — with
// TLS every endpoint is reached over TLS.
const Scheme = "etcd"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare, Inspect: inspect})
}

// etcdURL is a parsed etcd:// URL.
type etcdURL struct {
	endpoints  []string
	prefix     string
	user, pass string
	tls        *tls.Config
}

// parseURL reads the endpoints, prefix, credentials and TLS of u.
func parseURL(u *url.URL) (etcdURL, error) {
	var e etcdURL
	q, err := dlock.ParseQuery(u, tlsurl.Params...)
	if err != nil {
		return e, err
	}
	if u.Host == "" {
		return e, fmt.Errorf("%w: %s:// needs host:port[,host:port...]", dlock.ErrInvalidURL, Scheme)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return e, fmt.Errorf("%w: %s:// has an empty host in its host list", dlock.ErrInvalidURL, Scheme)
		}
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return e, fmt.Errorf("%w: %s:// host %q: want host:port", dlock.ErrInvalidURL, Scheme, h)
		}
		e.endpoints = append(e.endpoints, h)
	}
	if e.tls, err = tlsurl.Config(q, false); err != nil {
		return e, err
	}
	e.prefix = u.Path
	if err := validatePrefix(e.prefix); err != nil {
		return e, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	e.user = u.User.Username()
	e.pass, _ = u.User.Password()
	return e, nil
}

// declare: fencing by create revision, per-lease TTLs (etcd leases, whole seconds,
// MinTTL), refresh, waiters queued by revision (FIFO). Raft keeps every lock through
// a member's restart and a leader's death. Semaphores and read-write locks queue by
// revision too: fenced, in arrival order, with writer preference. Elections are the
// same queue (election.go, etcd's concurrency.Election layout); a set of keys is one
// transaction (multi.go), its revision each key's token.
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: true,
		DeletionSeen: spec.SeenByWatch, // a watch on the lock's key (lock.go)
		Semaphore:    &spec.Primitive{Native: true, Fencing: true, FIFO: true},
		RWLock:       &spec.Primitive{Native: true, Fencing: true, FIFO: true, WriterPreference: true},
		Election:     &spec.Primitive{Native: true, Fencing: true, FIFO: true},
		MultiKey:     &spec.Primitive{Native: true, Fencing: true}}, nil
}

// open is the URL opener: etcd://[user:pass@]host1:2379,host2:2379/prefix.
func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	e, cli, err := connect(ctx, u)
	if err != nil {
		return nil, err
	}
	return New(cli, WithPrefix(e.prefix), withOwnClient()), nil
}

// connect parses u, makes its client and checks that an endpoint answers, all
// within ctx.
func connect(ctx context.Context, u *url.URL) (etcdURL, *clientv3.Client, error) {
	e, err := parseURL(u)
	if err != nil {
		return e, nil, err
	}
	dial := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		dial = max(min(dial, time.Until(dl)), time.Millisecond)
	}
	// The client's Context bounds its whole life: it must outlive ctx.
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.endpoints, DialTimeout: dial, Context: context.WithoutCancel(ctx),
		Logger: zap.NewNop(), Username: e.user, Password: e.pass, TLS: e.tls})
	if err != nil {
		return e, nil, fmt.Errorf("etcdlock: connect %s: %w", u.Host, err)
	}
	if err := anyAnswers(ctx, cli, e.endpoints); err != nil {
		cli.Close()
		return e, nil, fmt.Errorf("etcdlock: %s: %w", u.Host, err)
	}
	return e, cli, nil
}

// anyAnswers asks every endpoint for its status at once and returns nil as soon as
// one answers, or the first endpoint's error once none did (an endpoint that is down
// may take all of ctx to fail).
func anyAnswers(ctx context.Context, cli *clientv3.Client, eps []string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(eps))
	for _, ep := range eps {
		go func() {
			_, err := cli.Status(ctx, ep)
			errs <- err
		}()
	}
	var first error
	for range eps {
		err := <-errs
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}
