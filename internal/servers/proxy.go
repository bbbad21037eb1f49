package servers

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

type proxyMode int

const (
	modeForward   proxyMode = iota
	modeCut                 // refuse: close every connection at once
	modeBlackhole           // accept, keep open, drop every byte
	modeStall               // hold bytes (TCP back-pressure) until Restore
	modeClosed
)

// Proxy is an in-process TCP proxy on a loopback port in front of one target,
// for network faults: Cut, Blackhole, Stall, Hold, LoseReply, Restore.
type Proxy struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cond  *sync.Cond // broadcast on mode change
	mode  proxyMode
	hold  []byte // Hold: client-to-target reads containing it are held back
	lose  []byte // LoseReply: the next client-to-target read containing it loses its reply
	conns map[net.Conn]struct{}
	held  int // client-to-target writes held back by Stall or Hold
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards every connection to
// target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port; point clients here instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

func (p *Proxy) setMode(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == modeClosed {
		return
	}
	p.mode = m
	if m == modeCut {
		for c := range p.conns {
			c.Close()
		}
	}
	p.cond.Broadcast()
}

// Cut closes every current connection and closes new ones as soon as they are
// accepted (clients see resets / EOF at once), until Restore.
func (p *Proxy) Cut() { p.setMode(modeCut) }

// Blackhole keeps connections open (and accepts new ones) but silently drops
// every byte in both directions, a close too, until Restore: clients see
// time-outs, not errors, and a side that closes its connection meanwhile is not
// heard of on the other side before Restore. Bytes dropped in a blackhole are lost for good, so a connection used
// during a blackhole is usually broken for its protocol afterwards.
func (p *Proxy) Blackhole() { p.setMode(modeBlackhole) }

// Stall holds every byte back (the proxy stops writing, so TCP back-pressure
// builds up) without dropping anything; Restore delivers what was held. A
// lagging link, not a broken one.
func (p *Proxy) Stall() { p.setMode(modeStall) }

// WaitStalled waits until Stall holds back bytes a client sent towards the target
// (a request the client believes is on its way), or until timeout; it reports
// whether some are held.
func (p *Proxy) WaitStalled(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	t := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.held == 0 && time.Now().Before(deadline) {
		p.cond.Wait()
	}
	return p.held > 0
}

// Hold holds back, until Restore, every request a client sends that contains match
// (each read from a client is one request for the protocols tested here): the
// connection that carries it stalls, as a lagging link would, while other requests
// go through. WaitStalled reports a held request. A request that matches nothing is
// not delayed.
func (p *Proxy) Hold(match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = []byte(match)
	p.cond.Broadcast()
}

// LoseReply makes the next request a client sends that contains match lose its
// reply: the request reaches the target, which runs it, and when the target's reply
// comes back the proxy closes that connection on both sides instead of delivering
// it — the client sees the connection drop (EOF) after its request was served. Once
// only; Restore disarms it.
func (p *Proxy) LoseReply(match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose = []byte(match)
}

// Restore forwards normally again (and ends Hold and LoseReply). Connections closed by
// Cut stay closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.hold, p.lose = nil, nil
	p.mu.Unlock()
	p.setMode(modeForward)
}

// Close stops listening and closes every connection. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.mode == modeClosed {
		p.mu.Unlock()
		return nil
	}
	p.mode = modeClosed
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == modeClosed || p.mode == modeCut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		server.Close()
		return
	}
	defer p.untrack(server)
	defer server.Close()
	done := make(chan struct{}, 2)
	var lose atomic.Bool // LoseReply chose this connection
	go func() { p.pipe(server, client, true, &lose); done <- struct{}{} }()
	go func() { p.pipe(client, server, false, &lose); done <- struct{}{} }()
	<-done
	// One direction ended: end both.
	client.Close()
	server.Close()
	<-done
}

// pipe copies src to dst, obeying the mode before every write; up says src is the
// client; lose is set on the connection whose next reply LoseReply drops.
func (p *Proxy) pipe(dst, src net.Conn, up bool, lose *atomic.Bool) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if up && p.lose != nil && bytes.Contains(buf[:n], p.lose) {
				p.lose = nil
				lose.Store(true)
			}
			if !up && lose.Load() {
				p.mu.Unlock()
				return // the reply is lost: serve closes both sides
			}
			if up && p.hold != nil && bytes.Contains(buf[:n], p.hold) {
				match := p.hold
				p.held++
				p.cond.Broadcast()
				for p.mode != modeClosed && p.hold != nil && bytes.Equal(p.hold, match) {
					p.cond.Wait()
				}
				p.held--
			}
			if up && p.mode == modeStall {
				p.held++
				p.cond.Broadcast()
				for p.mode == modeStall {
					p.cond.Wait()
				}
				p.held--
			}
			for p.mode == modeStall {
				p.cond.Wait()
			}
			m := p.mode
			p.mu.Unlock()
			switch m {
			case modeCut, modeClosed:
				return
			case modeBlackhole:
				// dropped
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			// A partition drops the FIN too: while the link is blackholed (or
			// stalled), one side's close does not reach the other (a client that
			// gives up on a cut-off server must not free its server-side session
			// through the proxy). It goes through on Restore; Cut and Close end it.
			p.mu.Lock()
			for p.mode == modeBlackhole || p.mode == modeStall {
				p.cond.Wait()
			}
			p.mu.Unlock()
			return
		}
	}
}

// Proxies is one client's links to several servers, acted on together (it satisfies
// conformance.Link).
type Proxies []*Proxy

// Blackhole blackholes every link.
func (ps Proxies) Blackhole() {
	for _, p := range ps {
		p.Blackhole()
	}
}

// Cut cuts every link.
func (ps Proxies) Cut() {
	for _, p := range ps {
		p.Cut()
	}
}

// Restore restores every link.
func (ps Proxies) Restore() {
	for _, p := range ps {
		p.Restore()
	}
}
