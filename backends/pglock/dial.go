package pglock

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dialTracker keeps every connection a pool it made dials (its sessions, and the
// connections pgx opens to send cancel requests), so that Close can cut them all:
// a statement cut off by its context on a hung network leaves pgx closing its
// connection in the background for up to 15 seconds (a cancel request, then a
// drain), and the pool's Close waits for that. Cut, they end at once.
//
// A cancel request in flight gets cancelGrace to finish first: PgBouncer 1.18
// (Debian 12's) exits when a client closes a cancel request's connection before
// the pooler has passed the request on (pgbouncer/pgbouncer#801, fixed by #846).
type dialTracker struct {
	dial pgconn.DialFunc

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newDialTracker(dial pgconn.DialFunc) *dialTracker {
	return &dialTracker{dial: dial, conns: map[*trackedConn]struct{}{}}
}

func (t *dialTracker) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := t.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, t: t, done: make(chan struct{})}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// cancelGrace is how long closeAll lets a cancel request in flight finish.
const cancelGrace = 500 * time.Millisecond

// closeAll closes every connection dialled (a cancel request's after cancelGrace,
// unless it ended before) and refuses new ones.
func (t *dialTracker) closeAll() {
	t.mu.Lock()
	t.closed = true
	var cancels []*trackedConn
	for c := range t.conns {
		if c.cancel.Load() {
			cancels = append(cancels, c)
			continue
		}
		delete(t.conns, c)
		c.Conn.Close()
	}
	t.mu.Unlock()
	end := time.Now().Add(cancelGrace)
	for _, c := range cancels {
		select {
		case <-c.done:
		case <-time.After(time.Until(end)):
			c.Close()
		}
	}
}

// trackedConn is a dialled connection; it leaves the tracker when closed, and
// gives raw access to its socket (the advisory mode's watch needs it).
type trackedConn struct {
	net.Conn
	t      *dialTracker
	cancel atomic.Bool   // its first message was a cancel request
	wrote  atomic.Bool   // it wrote something
	done   chan struct{} // closed by Close
	once   sync.Once
}

// cancelRequestCode is the protocol's CancelRequest code, after the message's
// length (16).
var cancelRequestCode = []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e}

func (c *trackedConn) Write(b []byte) (int, error) {
	if !c.wrote.Swap(true) && bytes.HasPrefix(b, cancelRequestCode) {
		c.cancel.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// SyscallConn gives the socket of the connection (syscall.Conn), where it has one.
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}

// unusable reports whether pg's socket says the connection is over — the server
// closed or reset it, or sent something while it sat idle (a FATAL error before
// closing) — without a round trip: a non-blocking peek. A URL's pool pings such a
// connection before it hands it out (ShouldPing), so that a statement after a
// server restart does not fail on a connection that died idle in the pool.
func unusable(pg *pgconn.PgConn) bool {
	sc, ok := socketOf(pg).(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// Control, not Read: Read takes the socket's read lock, which pgx's background
	// reader may hold in a read that never returns (a link that drops every byte),
	// and the peek waited for it for ever. The peek itself never waits.
	over := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		over = n > 0 || (n == 0 && err == nil) || (err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
	})
	return over
}

// discard drops a pooled connection whose session may hold locks (a transaction
// left open, advisory locks) and gives it back to the pool, which drops it. It cuts
// the TCP connection first: the server ends a session, freeing its locks, as soon
// as it reads the end of its connection. pgx's own close is not enough: after a
// request cut off by its ctx, pgx closes in the background (a cancel request,
// Terminate, then up to 15 s waiting for the server to close), and over TLS a write
// that timed out makes every later write fail (crypto/tls), so Terminate never left
// and the session kept its locks for those 15 s.
func discard(conn *pgxpool.Conn) {
	pg := conn.Conn().PgConn()
	if s := socketOf(pg); s != nil {
		_ = s.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_ = pg.Close(ctx)
	conn.Release()
}

// socketOf returns the TCP connection under pg's (under TLS too), or nil.
func socketOf(pg *pgconn.PgConn) net.Conn {
	nc := pg.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	return nc
}
