package zklock

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock-go/dlock"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// zk://host1:2181,host2:2181/root?session_timeout=10s. The path is the root (default
// DefaultRoot); session_timeout (a Go duration, default DefaultSessionTimeout) is
// the timeout requested from the ensemble.
const Scheme = "zk"

// DefaultSessionTimeout is the session timeout a zk:// URL requests by default.
const DefaultSessionTimeout = 10 * time.Second

func init() { dlock.Register(Scheme, open) }

// open connects to the hosts of u, waits for a session, creates the root if it is
// missing, and returns a Locker that closes the connection on Close.
func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	if err := dlock.CheckQuery(u, "session_timeout"); err != nil {
		return nil, err
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: zk:// takes no user information", dlock.ErrInvalidURL)
	}
	var hosts []string
	for _, h := range strings.Split(u.Host, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: zk:// needs at least one host, got %q", dlock.ErrInvalidURL, u.Redacted())
	}
	root := u.Path
	if root == "" || root == "/" {
		root = DefaultRoot
	}
	if err := validateRoot(root); err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	timeout := DefaultSessionTimeout
	if v := u.Query().Get("session_timeout"); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t <= 0 {
			return nil, fmt.Errorf("%w: session_timeout=%q is not a positive duration", dlock.ErrInvalidURL, v)
		}
		timeout = t
	}

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

func waitSession(ctx context.Context, events <-chan zk.Event) error {
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return zk.ErrClosing
			}
			if e.State == zk.StateHasSession {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sniffConn reads the negotiated session timeout from the first bytes a server
// sends on a new connection: length, protocol version, timeout (big-endian int32s).
type sniffConn struct {
	net.Conn
	hdr       [12]byte
	got       int
	onTimeout func(ms int32)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.got < len(c.hdr) && n > 0 {
		c.got += copy(c.hdr[c.got:], p[:n])
		if c.got == len(c.hdr) {
			if ms := int32(binary.BigEndian.Uint32(c.hdr[8:])); ms > 0 {
				c.onTimeout(ms)
			}
		}
	}
	return n, err
}

// quiet drops go-zookeeper's log lines (every reconnect attempt is logged).
type quiet struct{}

func (quiet) Printf(string, ...any) {}
