package conformance

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestClientLeaks: a goroutine of the test's own is reported; one of an in-process
// server (etcd's) is not.
func TestClientLeaks(t *testing.T) {
	before := goleak.IgnoreCurrent()
	stop := make(chan struct{})
	go func() { <-stop }()
	left := clientLeaks(goleak.Find(before))
	close(stop)
	if len(left) != 1 || !strings.Contains(left[0], "TestClientLeaks") {
		t.Errorf("a leaked goroutine of the test: %q, want it reported", left)
	}
	server := "found unexpected goroutines:\n[Goroutine 7 in state select, with x on top of the stack:\ngo.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).LeaseKeepAlive(...)\n Goroutine 9 in state chan receive, with y on top of the stack:\nexample.com/client.loop()\n]"
	left = clientLeaks(errString(server))
	if len(left) != 1 || !strings.Contains(left[0], "example.com/client.loop") {
		t.Errorf("a server's goroutine and a client's: %q, want only the client's", left)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
