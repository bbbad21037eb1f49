package servers

import (
	"net"
	"testing"
)

// Server ports come from below the kernel's ephemeral range, where no connection's
// local port can land while a restarted server is down; each is handed out once and
// binds. Where the range leaves too few ports below it (the kernel then chooses),
// the ports must still be distinct and bind.
func TestServerPortsBelowEphemeralRange(t *testing.T) {
	lo, hi, below := serverPorts()
	t.Logf("ports below the ephemeral range: %v [%d, %d)", below, lo, hi)
	ports, err := freePorts(64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if below && (p < lo || p >= hi) {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", hostPort(p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
