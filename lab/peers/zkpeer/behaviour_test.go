package zkpeer_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	peertest.CheckOpen(t, "peer+zk://"+servertest.ZooKeeper(t).Addr()+"/peertest?session_timeout=2s")
}
