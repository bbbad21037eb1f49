package zklock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// zk://[user:password@]host1:2181,host2:2181/root?session_timeout=10s. The path is
// the root (default DefaultRoot); session_timeout (a Go duration from 100ms to 24h,
// default DefaultSessionTimeout) is the timeout requested from the ensemble. A user and
// password authenticate the session (ZooKeeper's digest scheme), and the nodes the
// Locker creates then carry a creator-only ACL (zk.AuthACL(zk.PermAll)): other
// clients can neither delete nor alter them, nor add children to the lock
// directories. The TLS parameters (tls, tls_ca, tls_cert, tls_key, tls_server_name;
// see docs/connecting.md) reach the ensemble's secure client port.
const Scheme = "zk"

// DefaultSessionTimeout is the session timeout a zk:// URL requests by default.
const DefaultSessionTimeout = 10 * time.Second

// The bounds of session_timeout. Below 100ms the request only shortens
// go-zookeeper's wait for the server's answer to a connect (6.7 times the request;
// below 1ms it is 0 and no session is ever made), while the ensemble grants at
// least 2 ticks anyway. The protocol carries milliseconds in an int32, which wraps
// at 596h; a day is far above what an ensemble grants (20 ticks by default) and as
// long as a crashed holder's locks should outlive it.
const (
	minSessionTimeout = 100 * time.Millisecond
	maxSessionTimeout = 24 * time.Hour
)

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare, Inspect: inspect})
}

// zkURL is a parsed zk:// URL.
type zkURL struct {
	hosts      []string
	root       string
	timeout    time.Duration
	user, pass string // digest credentials ("" for none)
	tls        *tls.Config
}

func parseURL(u *url.URL) (zkURL, error) {
	var z zkURL
	q, err := dlock.ParseQuery(u, tlsurl.With("session_timeout")...)
	if err != nil {
		return z, err
	}
	if u.User != nil {
		z.user = u.User.Username()
		var ok bool
		if z.pass, ok = u.User.Password(); !ok || z.user == "" {
			return z, fmt.Errorf("%w: zk:// user information must be user:password (ZooKeeper's digest scheme)", dlock.ErrInvalidURL)
		}
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
				return z, fmt.Errorf("%w: zk:// host %q: want host:port", dlock.ErrInvalidURL, h)
			}
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
	if z.timeout, err = q.Duration("session_timeout", DefaultSessionTimeout, minSessionTimeout, maxSessionTimeout); err != nil {
		return z, err
	}
	if z.tls, err = tlsurl.Config(q, false); err != nil {
		return z, err
	}
	return z, nil
}

// declare: fencing by the lock node's creation zxid; locks last as long as the
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
		DeletionSeen: spec.SeenByWatch, // a watch on the lock's node (session.go)
		// Curator's layouts: the semaphore's queue is D/locks (a waiter that finds it
		// empty may take a permit freed for an earlier one: no order promised); the
		// read-write lock's nodes are served by sequence, writers first; the
		// election's are LeaderLatch's latch- nodes.
		Semaphore: &spec.Primitive{Native: true, Fencing: true},
		RWLock:    &spec.Primitive{Native: true, Fencing: true, FIFO: true, WriterPreference: true},
		Election:  &spec.Primitive{Native: true, Fencing: true, FIFO: true},
		MultiKey:  &spec.Primitive{Fencing: true}}, nil
}

// session is a connection opened from a URL, with what it learnt on the way.
type session struct {
	z          zkURL
	conn       *zk.Conn
	acl        []zk.ACL
	negotiated func() time.Duration // the session timeout the ensemble granted
}

// connect connects to the hosts of u (over TLS if it says so), waits for a session,
// authenticates it if u has credentials, and creates the root if it is missing.
func connect(ctx context.Context, u *url.URL) (*session, error) {
	z, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	// The session timeout the ensemble grants may differ from the one requested; read
	// it from the connect response (protocol version, then the timeout in ms).
	var negotiated atomic.Int64
	dial := func(network, addr string, d time.Duration) (net.Conn, error) {
		nd := &net.Dialer{Timeout: d}
		var c net.Conn
		var err error
		if z.tls != nil {
			c, err = tls.DialWithDialer(nd, network, addr, z.tls)
		} else {
			c, err = nd.Dial(network, addr)
		}
		if err != nil {
			return nil, err
		}
		return &sniffConn{Conn: c, onTimeout: func(ms int32) { negotiated.Store(int64(ms) * int64(time.Millisecond)) }}, nil
	}
	// The hosts reach the dialer as the URL names them (namedHosts), so that TLS
	// verifies each server's certificate under its own host name: go-zookeeper's
	// default provider would resolve them first and hand over IP addresses.
	conn, events, err := zk.Connect(z.hosts, z.timeout, zk.WithDialer(dial), zk.WithHostProvider(&namedHosts{}), zk.WithLogger(quiet{}))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect %v: %w", z.hosts, err)
	}
	s := &session{z: z, conn: conn, acl: zk.WorldACL(zk.PermAll),
		negotiated: func() time.Duration { return time.Duration(negotiated.Load()) }}
	if err := s.setUp(ctx, events); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *session) setUp(ctx context.Context, events <-chan zk.Event) error {
	if err := waitSession(ctx, events); err != nil {
		return fmt.Errorf("zklock: connect %v: %w", s.z.hosts, err)
	}
	if s.z.user != "" {
		// go-zookeeper sends the credentials again on every reconnection.
		auth := []byte(s.z.user + ":" + s.z.pass)
		if _, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.AddAuth("digest", auth) }, nil); err != nil {
			return fmt.Errorf("zklock: authenticate as %q: %w", s.z.user, err)
		}
		s.acl = zk.AuthACL(zk.PermAll)
	}
	if _, err := call(ctx, func() (struct{}, error) { return struct{}{}, makePath(s.conn, s.z.root, s.acl) }, nil); err != nil {
		return fmt.Errorf("zklock: %w", err)
	}
	return nil
}

// open connects (see connect) and returns a Locker that closes the connection on
// Close.
func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	s, err := connect(ctx, u)
	if err != nil {
		return nil, err
	}
	return newLocker(s.conn, config{root: s.z.root, acl: s.acl, timeout: s.z.timeout, closeConn: true, negotiated: s.negotiated}), nil
}
