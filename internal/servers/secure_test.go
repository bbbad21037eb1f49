package servers_test

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// TestRedisTLS: a Redis started with a PKI and a password serves TLS only, wants a
// client certificate and AUTH; Do speaks all three.
func TestRedisTLS(t *testing.T) {
	pki := servertest.PKI(t)
	r := servertest.NewRedis(t, servers.RedisOptions{TLS: pki, Password: "adm1n"})
	if s, err := r.Do(ctxT(t, 5*time.Second), "PING"); err != nil || s != "PONG" {
		t.Fatalf("Do PING: %q, %v", s, err)
	}
	ping := func(o *redis.Options) error {
		o.Addr, o.MaxRetries, o.DialTimeout = r.Addr(), -1, 2*time.Second
		c := redis.NewClient(o)
		defer c.Close()
		return c.Ping(ctxT(t, 5*time.Second)).Err()
	}
	if err := ping(&redis.Options{Password: "adm1n", TLSConfig: pki.ClientTLS()}); err != nil {
		t.Fatalf("TLS client with certificate and password: %v", err)
	}
	if err := ping(&redis.Options{Password: "adm1n"}); err == nil {
		t.Error("a plain-text client was served")
	}
	noCert := pki.ClientTLS()
	noCert.Certificates = nil
	if err := ping(&redis.Options{Password: "adm1n", TLSConfig: noCert}); err == nil {
		t.Error("a client without a certificate was served")
	}
	if err := ping(&redis.Options{TLSConfig: pki.ClientTLS()}); err == nil {
		t.Error("a client without the password was served")
	}
	other := servertest.PKI(t)
	if err := ping(&redis.Options{Password: "adm1n", TLSConfig: &tls.Config{RootCAs: other.ClientTLS().RootCAs,
		Certificates: pki.ClientTLS().Certificates}}); err == nil {
		t.Error("a client that trusts another CA accepted the server")
	}
}

// TestRedisSentinelGroup: the sentinels name the master, and after it is killed
// they promote a replica and the other replica follows it.
func TestRedisSentinelGroup(t *testing.T) {
	g := servertest.RedisSentinelGroup(t, 2, 3)
	old, err := g.MasterAddr(ctxT(t, 10*time.Second))
	if err != nil || old != g.Master.Addr() {
		t.Fatalf("master named by the sentinels: %q, %v; want %s", old, err, g.Master.Addr())
	}
	if err := g.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	addr, err := g.WaitFailover(ctxT(t, 60*time.Second), old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s done %v after the kill", addr, time.Since(t0).Round(time.Millisecond))
}

// TestZooKeeperTLS: a ZooKeeper started with a PKI serves its client port over TLS
// only (FourLetter speaks it), and a plain-text request gets no answer.
func TestZooKeeperTLS(t *testing.T) {
	pki := servertest.PKI(t)
	z := servertest.NewZooKeeper(t, servers.ZooKeeperOptions{TLS: pki})
	if m, err := z.Mode(ctxT(t, 10*time.Second)); err != nil || m != "standalone" {
		t.Fatalf("Mode over TLS: %q, %v", m, err)
	}
	c, err := net.DialTimeout("tcp", z.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(c); strings.Contains(string(b), "Mode") {
		t.Errorf("a plain-text srvr was answered: %q", b)
	}
}
