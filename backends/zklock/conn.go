// Connection helpers: requests that go-zookeeper cannot bound by a context, retries
// while the client is disconnected, and what the connection tells about its session.

package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// call runs f, a blocking request on the connection (go-zookeeper takes no
// context), and waits for it or for ctx. When ctx ends first, f goes on and undo
// (if not nil) gets its result, to take back what it did: call waits up to
// undoAnswerWait for f's answer and runs undo before it returns, so that what f
// made on the server is gone when the caller hears of its cancel; past that bound
// (a store that does not answer) undo runs in the background when f returns.
func call[T any](ctx context.Context, f func() (T, error), undo func(T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if undo == nil {
			return zero, ctx.Err()
		}
		t := time.NewTimer(undoAnswerWait)
		defer t.Stop()
		select {
		case r := <-ch:
			undo(r.v, r.err)
		case <-t.C:
			go func() {
				r := <-ch
				undo(r.v, r.err)
			}()
		}
		return zero, ctx.Err()
	}
}

// undoAnswerWait bounds how long a cancelled call waits for the answer of a request
// it must take back (call's undo), and undoWait how long the undo itself (a delete)
// is waited for, before the rest is left to the background. On a store that
// answers each takes a round trip; the bounds keep a cancelled call prompt on one
// that does not.
const (
	undoAnswerWait = 500 * time.Millisecond
	undoWait       = 2 * time.Second
)

// transient reports an error after which the same request may succeed once the
// client is connected again.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

// settle runs op until it gives an answer that is not transient or the Locker is
// closed. It sets no time limit of its own: a client cut off from the ensemble
// cannot tell when its session ends (a new leader gives every session a fresh
// timeout), and a node of a session that did end is answered with ErrNoNode once
// the client reaches the ensemble again.
func (d *zkDriver) settle(op func() error) error {
	pause := 10 * time.Millisecond
	for {
		err := op()
		if !transient(err) {
			return err
		}
		select {
		case <-d.done:
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// discard deletes a node of ours that must not stay (an abandoned wait, a lease
// that ended while its session may live on), retrying while the client is
// disconnected.
func (d *zkDriver) discard(path string) {
	_ = d.settle(func() error { return d.conn.Delete(path, -1) })
}

func (d *zkDriver) sessionTimeout() time.Duration {
	if d.cfg.negotiated != nil {
		if t := d.cfg.negotiated(); t > 0 {
			return t
		}
	}
	return d.cfg.timeout
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

// namedHosts is a zk.HostProvider that hands the dialer each server as the URL
// names it ("zk1.example:2281"), in a random order, rather than the addresses its
// name resolved to (go-zookeeper's DNSHostProvider): a TLS dial then verifies the
// certificate under that name (tls.DialWithDialer takes ServerName from the
// address), and the name is resolved again at each dial (net.Dialer tries each
// address it has).
type namedHosts struct {
	mu         sync.Mutex
	servers    []string
	curr, last int
}

// Init takes the servers (host:port each) and shuffles them.
func (h *namedHosts) Init(servers []string) error {
	for _, s := range servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return err
		}
	}
	if len(servers) == 0 {
		return errors.New("no ZooKeeper server")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = slices.Clone(servers)
	rand.Shuffle(len(h.servers), func(i, j int) { h.servers[i], h.servers[j] = h.servers[j], h.servers[i] })
	h.curr, h.last = -1, -1
	return nil
}

// Len is the number of servers.
func (h *namedHosts) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server to try; retryStart is true once every server was
// tried since the last successful connection (go-zookeeper then pauses).
func (h *namedHosts) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.curr = (h.curr + 1) % len(h.servers)
	retryStart = h.curr == h.last
	if h.last == -1 {
		h.last = 0
	}
	return h.servers[h.curr], retryStart
}

// Connected notes that the current server was reached.
func (h *namedHosts) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = h.curr
}

// quiet drops go-zookeeper's log lines (every reconnect attempt is logged).
type quiet struct{}

func (quiet) Printf(string, ...any) {}
