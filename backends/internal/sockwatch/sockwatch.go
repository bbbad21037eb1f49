// Package sockwatch lets a lock held by a connection's session notice the moment
// the server ends that session. A server ends a session by closing its connection
// (a kill, a shutdown, the server process dying: the kernel closes it), often after
// writing an error nobody asked for; a lease that learned of it only at its next
// ping would let a server that restarts within one ping interval grant the lock to
// another client while the first still believes it holds it. So a held lease
// watches its connection's socket between its own statements, parked in Go's
// network poller, and checks its session the moment the socket becomes readable:
// the peer closed it, reset it, or sent bytes.
//
// Used by mysql+getlock (mysqllock) and postgres+advisory (pglock).
package sockwatch

import (
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Watch waits, in its own goroutine, for a socket to become readable. Between
// Start and Stop no one else may read the socket; Stop returns once the goroutine
// has let go of it.
type Watch struct {
	nc net.Conn
	rc syscall.RawConn

	mu       sync.Mutex // orders Stop's deadline with the goroutine's clearing of a stale one
	stopping bool
	exit     chan struct{} // closed when the goroutine has let go of the socket
}

// New returns a watch of nc, or nil where nc offers no raw access to its socket
// (not a syscall.Conn: a TLS connection must be given its underlying connection).
func New(nc net.Conn) *Watch {
	if nc == nil {
		return nil
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &Watch{nc: nc, rc: rc}
}

// Start begins a watch: readable is called (in the watch's goroutine) when the
// socket is readable — closed, reset or holding bytes — unless Stop came first.
// Calls to Start and Stop alternate; a nil Watch does nothing.
func (w *Watch) Start(readable func()) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopping = false
	w.exit = make(chan struct{})
	w.mu.Unlock()
	go w.run(w.exit, readable)
}

func (w *Watch) run(exit chan struct{}, readable func()) {
	for {
		err := w.rc.Read(func(fd uintptr) bool {
			var b [1]byte
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			// EAGAIN: nothing yet, wait in the poller. Anything else — bytes (n > 0),
			// end of stream (n == 0), an error — ends the wait.
			return n > 0 || (n == 0 && err == nil) || (err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.mu.Lock()
			if w.stopping {
				w.mu.Unlock()
				close(exit)
				return
			}
			_ = w.nc.SetReadDeadline(time.Time{}) // a deadline the driver left behind: not ours
			w.mu.Unlock()
			continue
		}
		close(exit)
		readable() // readable, closed, or an error of the socket itself
		return
	}
}

// Stop ends the watch and returns when its goroutine no longer reads the socket.
// The socket is left without a read deadline. Safe to call when not started, and
// on a nil Watch.
func (w *Watch) Stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	exit := w.exit
	if exit == nil {
		w.mu.Unlock()
		return
	}
	w.stopping = true
	_ = w.nc.SetReadDeadline(time.Unix(1, 0)) // wakes the poller's wait at once
	w.mu.Unlock()
	<-exit
	w.mu.Lock()
	w.exit = nil
	_ = w.nc.SetReadDeadline(time.Time{})
	w.mu.Unlock()
}

// CloseConn closes the watched socket: a read pending on it (a ping left
// unanswered) returns.
func (w *Watch) CloseConn() error {
	return w.nc.Close()
}
