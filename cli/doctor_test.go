package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
)

// checkOutput runs dlock with args and returns its exit code and stdout.
func checkOutput(t *testing.T, args ...string) (int, string) {
	t.Helper()
	p := startDlock(t, args...)
	var out strings.Builder
	for l := range p.out {
		out.WriteString(l + "\n")
	}
	code := p.wait(t)
	drain(p.errs)
	return code, out.String()
}

// TestDoctor: "dlock check --doctor" prints, for servers configured each way, the
// findings that name the scenario each setting exposes the locks to, and exits 1
// when one is an exposure.
func TestDoctor(t *testing.T) {
	master, _ := servertest.RedisReplicaPair(t)
	evicting := servertest.NewRedis(t, servers.RedisOptions{AOF: "always", Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"}})
	zk := servertest.ZooKeeper(t) // maxSessionTimeout 60s
	for _, c := range []struct {
		name, url string
		code      int
		want      []string // regular expressions, one line each
	}{
		{"redis without persistence", redisURL(t), 1, []string{
			`EXPOSED  ServerRestart +appendonly=no save=""`,
			`ok       MutualExclusion +maxmemory-policy=noeviction`,
			`ok       Failover +role:master connected_slaves:0`,
			`Exposed to: ServerRestart, ClockJump`}},
		{"redis with an eviction policy", "redis://" + evicting.Addr(), 1, []string{
			`EXPOSED  MutualExclusion +maxmemory-policy=volatile-lru maxmemory=67108864`,
			`ok       ServerRestart +appendonly=yes appendfsync=always`}},
		{"redis with a replica, no wait_replicas", "redis://" + master.Addr(), 1, []string{
			`EXPOSED  Failover +role:master connected_slaves:1 wait_replicas=0`,
			`.*a replica promoted after the master dies may never have seen a held lock`}},
		{"redis with a replica and wait_replicas", "redis://" + master.Addr() + "?wait_replicas=1", 1, []string{
			`ok       Failover +role:master connected_slaves:1 wait_replicas=1`}},
		{"zookeeper with a clamped session timeout", "zk://" + zk.Addrs()[0] + "/dlock-doctor?session_timeout=2m", 1, []string{
			`EXPOSED  HolderPause +session_timeout asked 2m0s, granted 1m0s`,
			`EXPOSED  QuorumLoss +standalone server`,
			`EXPOSED  MutualExclusion +lock nodes' ACL: world`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := checkOutput(t, "check", "--url", c.url, "--doctor")
			if code != c.code {
				t.Errorf("exit %d, want %d", code, c.code)
			}
			for _, w := range c.want {
				if !regexp.MustCompile(`(?m)^\s*` + w).MatchString(out) {
					t.Errorf("no line matching %q in:\n%s", w, out)
				}
			}
		})
	}
	// No deployment check for mem://: a usage error with --doctor.
	if code, _ := checkOutput(t, "check", "--url", "mem://", "--doctor"); code != exitUsage {
		t.Errorf("check --doctor mem://: exit %d, want %d", code, exitUsage)
	}
	// Without --doctor the findings come first, then the suite.
	code, out := checkOutput(t, "check", "--url", redisURL(t), "--run", "TryAcquire")
	if code != 0 || !strings.Contains(out, "Deployment check of redis://") || !regexp.MustCompile(`(?m)^PASS TryAcquire`).MatchString(out) {
		t.Errorf("check: exit %d, want 0, the findings and the suite's lines:\n%s", code, out)
	}
}
