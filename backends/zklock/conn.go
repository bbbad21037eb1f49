// Connection helpers: requests that go-zookeeper cannot bound by a context, retries
// while the client is disconnected, and what the connection tells about its session.

package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"time"

	"github.com/go-zookeeper/zk"
)

// call runs f, a blocking request on the connection (go-zookeeper takes no
// context), and waits for it or for ctx. When ctx ends first, f goes on and undo
// (if not nil) gets its result when it returns, to take back what it did.
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
		if undo != nil {
			go func() {
				r := <-ch
				undo(r.v, r.err)
			}()
		}
		return zero, ctx.Err()
	}
}

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

// quiet drops go-zookeeper's log lines (every reconnect attempt is logged).
type quiet struct{}

func (quiet) Printf(string, ...any) {}
