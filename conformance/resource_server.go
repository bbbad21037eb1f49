package conformance

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// resourceServer puts a Resource on a loopback TCP port so that holders in child
// processes can enter and leave it. The protocol is one line per request:
// "ENTER <holder> <token>" answers "OK" or "STALE"; "LEAVE <holder>" answers "OK".
type resourceServer struct {
	*Resource
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn map[net.Conn]struct{}
}

// newResourceServer serves r on 127.0.0.1 (a free port) until Close.
func newResourceServer(r *Resource) (*resourceServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &resourceServer{Resource: r, ln: ln, conn: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the host:port children dial.
func (s *resourceServer) Addr() string { return s.ln.Addr().String() }

// Close stops serving and waits for every connection's goroutine to end.
func (s *resourceServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	for c := range s.conn {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *resourceServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conn[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *resourceServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conn, c)
		s.mu.Unlock()
		c.Close()
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		reply := "ERR bad request"
		switch {
		case len(f) == 3 && f[0] == "ENTER":
			if tok, err := strconv.ParseUint(f[2], 10, 64); err == nil {
				reply = "STALE"
				if s.Enter(f[1], tok) {
					reply = "OK"
				}
			}
		case len(f) == 2 && f[0] == "LEAVE":
			s.Leave(f[1])
			reply = "OK"
		}
		if _, err := fmt.Fprintln(c, reply); err != nil {
			return
		}
	}
}

// resourceCall sends one request to a resourceServer and returns its answer.
func resourceCall(addr, req string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := fmt.Fprintln(c, req); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}
