package getlockpeer_test

import (
	"net/url"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/lab/peers/internal/peertest"
)

func TestOpen(t *testing.T) {
	cfg, err := mysql.ParseDSN(servertest.MySQL(t).DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	peertest.CheckOpen(t, "peer+getlock://"+url.UserPassword(cfg.User, cfg.Passwd).String()+"@"+cfg.Addr+"/")
}

// TestCutHolderLearnsAtRelease shows what a GET_LOCK holder whose connection is cut
// goes through: the server frees the lock for another client at once, the holder's
// lease stays open (nothing tells database/sql), and its Release finds the lock gone.
func TestCutHolderLearnsAtRelease(t *testing.T) {
	h := newHarness(t)
	a, b := h.NewLocker(t), h.NewLocker(t)
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	peertest.CheckCutHolderLearnsAtRelease(t, a, b, func() { h.Vanish(t, a) })
}
