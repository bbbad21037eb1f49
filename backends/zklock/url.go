package zklock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// zk://host1:2181,host2:2181/root?session_timeout=10s. The path is the root (default
// DefaultRoot); session_timeout (a Go duration, default DefaultSessionTimeout) is
// the timeout requested from the ensemble.
const Scheme = "zk"

// DefaultSessionTimeout is the session timeout a zk:// URL requests by default.
const DefaultSessionTimeout = 10 * time.Second

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// zkURL is a parsed zk:// URL.
type zkURL struct {
	hosts   []string
	root    string
	timeout time.Duration
}

func parseURL(u *url.URL) (zkURL, error) {
	var z zkURL
	q, err := dlock.ParseQuery(u, "session_timeout")
	if err != nil {
		return z, err
	}
	if u.User != nil {
		return z, fmt.Errorf("%w: zk:// takes no user information", dlock.ErrInvalidURL)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			z.hosts = append(z.hosts, h)
		}
	}
	if len(z.hosts) == 0 {
		return z, fmt.Errorf("%w: zk:// needs at least one host", dlock.ErrInvalidURL)
	}
	z.root = u.Path
	if z.root == "" || z.root == "/" {
		z.root = DefaultRoot
	}
	if err := validateRoot(z.root); err != nil {
		return z, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	z.timeout = DefaultSessionTimeout
	if v, ok := q["session_timeout"]; ok {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return z, fmt.Errorf("%w: session_timeout=%q is not a positive duration", dlock.ErrInvalidURL, v)
		}
		z.timeout = t
	}
	return z, nil
}

// declare: fencing by the lock node's sequence number; locks last as long as the
// session, which the ensemble ends session_timeout after it last heard from the
// client (the ensemble may grant a timeout other than the one requested: within
// 2 and 20 ticks); waiters queue by sequence (FIFO). Elections are the same queue in
// Curator's LeaderLatch layout (election.go); sets of keys are taken key by key
// (zxid tokens fence each key).
func declare(u *url.URL) (spec.Capabilities, error) {
	z, err := parseURL(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, SessionTimeout: z.timeout, FIFO: true,
		Election: &spec.Primitive{Native: true, Fencing: true, FIFO: true}, MultiKey: &spec.Primitive{Fencing: true}}, nil
}

// open connects to the hosts of u, waits for a session, creates the root if it is
// missing, and returns a Locker that closes the connection on Close.
func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	z, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	hosts, root, timeout := z.hosts, z.root, z.timeout

	// The session timeout the ensemble grants may differ from the one requested; read
	// it from the connect response (protocol version, then the timeout in ms).
	var negotiated atomic.Int64
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, d)
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, onTimeout: func(ms int32) { negotiated.Store(int64(ms) * int64(time.Millisecond)) }}, nil
	}
	conn, events, err := zk.Connect(hosts, timeout, zk.WithDialer(dial), zk.WithLogger(quiet{}))
	if err != nil {
		return nil, fmt.Errorf("zookeeper: connect %v: %w", hosts, err)
	}
	if err := waitSession(ctx, events); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zookeeper: connect %v: %w", hosts, err)
	}
	if _, err := call(ctx, func() (struct{}, error) { return struct{}{}, makePath(conn, root, zk.WorldACL(zk.PermAll)) }, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	return newLocker(conn, config{root: root, acl: zk.WorldACL(zk.PermAll), timeout: timeout, closeConn: true,
		negotiated: func() time.Duration { return time.Duration(negotiated.Load()) }}), nil
}
