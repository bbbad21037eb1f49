package redsyncpeer_test

import (
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	masters := servertest.RedisMasters(t, 3)
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	peertest.CheckOpen(t, "peer+redsync://"+strings.Join(addrs, ","))
}
