package cli

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/etcdlock"
	"github.com/dlock-go/dlock/backends/mysqllock"
	"github.com/dlock-go/dlock/backends/redlock"
	"github.com/dlock-go/dlock/backends/zklock"
	"github.com/dlock-go/dlock/internal/servers"
	"github.com/dlock-go/dlock/internal/servers/servertest"
	"github.com/dlock-go/dlock/spec"
)

func mustMatch(t *testing.T, pattern, s string) bool {
	t.Helper()
	ok, err := regexp.MatchString(pattern, s)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestCheckRedis runs dlock check against a real Redis: every property holds.
func TestCheckRedis(t *testing.T) {
	code, stdout, stderr := runLong(t, 3*time.Minute, "", nil, "check", "--url", redisURL(t))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, p := range spec.Properties {
		want := "PASS"
		if p == spec.FIFO {
			want = "SKIP" // redis has no queue: waiters may be overtaken
		}
		if !mustMatch(t, `(?m)^`+want+` `+string(p)+` \(`, stdout) {
			t.Errorf("no %s line for %s:\n%s", want, p, stdout)
		}
	}
	if !strings.Contains(stdout, "behaves as the redis backend declares") {
		t.Errorf("no verdict:\n%s", stdout)
	}
}

// TestThirdPartyBackend: a backend registered from outside the module's backends
// (testdata/thirdparty, written with the exported API only) is checked by `check`
// in a binary of its own that calls cli.Main; the same backend with an Unlock that
// ignores the owner fails the check.
func TestThirdPartyBackend(t *testing.T) {
	run := func(env ...string) (int, string, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, thirdPartyBin, "check", "--url", "tiny://")
		cmd.Env = append(os.Environ(), env...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		_ = cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("check still running after 3m: %s", errb.String())
		}
		return cmd.ProcessState.ExitCode(), out.String(), errb.String()
	}
	code, stdout, stderr := run()
	if code != 0 || !strings.Contains(stdout, "behaves as the tiny backend declares") {
		t.Fatalf("check tiny://: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = run("TINY_BROKEN=1")
	if code != 1 || !mustMatch(t, `(?m)^FAIL OwnerOnlyRelease`, stdout) {
		t.Fatalf("check tiny:// with an Unlock that ignores the owner: exit %d, want 1 and OwnerOnlyRelease failed:\n%s", code, stdout)
	}
}

// TestCheckSETNXWeakness: a declared weakness reproduces on the real server, and the
// one that needs a harness fault is named as not checked.
func TestCheckSETNXWeakness(t *testing.T) {
	code, stdout, stderr := runLong(t, 3*time.Minute, "", nil, "check", "--url",
		"redis+setnx://"+servertest.Redis(t).Addr()+"?variant=getset", "--run", "OwnerOnlyRelease|MutualExclusion")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !mustMatch(t, `(?m)^redis\+setnx +ok +weak`, stdout) {
		t.Errorf("want MutualExclusion ok and OwnerOnlyRelease weak (as declared):\n%s", stdout)
	}
	if !strings.Contains(stdout, "not checked here") || !strings.Contains(stdout, "MutualExclusion") {
		t.Errorf("the fault-only weakness is not named:\n%s", stdout)
	}
	if strings.Contains(stdout, "PASS Expiry") {
		t.Errorf("--run did not limit the properties:\n%s", stdout)
	}
}

// TestCheckFailing is the negative control: a Redis that refuses every write (its
// memory limit reached) fails the suite, and dlock check says so and exits 1.
func TestCheckFailing(t *testing.T) {
	r := servertest.NewRedis(t, servers.RedisOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Do(ctx, "CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runLong(t, 3*time.Minute, "", nil, "check", "--url", "redis://"+r.Addr(), "--run", "MutualExclusion|TryAcquire")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"FAIL MutualExclusion", "FAIL TryAcquire", "OOM", "does NOT behave"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestCheckUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "--url is required"},
		{[]string{"--url", "nosuch://x"}, exitUsage, `unknown scheme "nosuch"`},
		{[]string{"--url", "127.0.0.1:6379"}, exitUsage, "want scheme://"},
		{[]string{"--url", "redis://127.0.0.1:6379?bogus=1"}, exitUsage, `unknown query parameter "bogus"`},
		{[]string{"--url", "redis+setnx://127.0.0.1:6379"}, exitUsage, "variant"},
		{[]string{"--url", "mem://", "--run", "("}, exitUsage, "--run"},
		{[]string{"--url", "redis://" + closedAddr(t)}, exitUnavailable, "cannot reach"},
	} {
		code, _, stderr := runLong(t, time.Minute, "", nil, append([]string{"check"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("check %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// TestEveryBuiltInSchemeDeclares: every scheme built into dlock declares what it
// guarantees (dlock check needs it), and a declaration refuses what the opener
// refuses, without a server.
func TestEveryBuiltInSchemeDeclares(t *testing.T) {
	for _, s := range dlock.Schemes() {
		u := &url.URL{Scheme: s}
		if _, err := dlock.Declared(u); errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("scheme %s registers no declaration", s)
		}
	}
	for _, tc := range []struct {
		url  string
		got  func(spec.Capabilities) time.Duration
		want time.Duration
	}{
		{"etcd://h:2379", func(c spec.Capabilities) time.Duration { return c.MinTTL }, etcdlock.MinTTL},
		{"mysql://u@h/db", func(c spec.Capabilities) time.Duration { return c.MinTTL }, mysqllock.MinTTL},
		{"redlock://a:1,b:2,c:3", func(c spec.Capabilities) time.Duration { return c.MinTTL }, redlock.MinTTL},
		{"zk://h:2181", func(c spec.Capabilities) time.Duration { return c.SessionTimeout }, zklock.DefaultSessionTimeout},
		{"zk://h:2181?session_timeout=3s", func(c spec.Capabilities) time.Duration { return c.SessionTimeout }, 3 * time.Second},
		{"mysql+getlock://u@h/db?wait_timeout=7", func(c spec.Capabilities) time.Duration { return c.SessionTimeout }, 7 * time.Second},
	} {
		u, _ := url.Parse(tc.url)
		c, err := dlock.Declared(u)
		if err != nil || tc.got(c) != tc.want {
			t.Errorf("Declared(%s): %v (%v), want %v", tc.url, tc.got(c), err, tc.want)
		}
	}
	for _, bad := range []string{"redis+setnx://h:1", "redis+setnx://h:1?variant=x", "zk://h?session_timeout=-1s", "nosuch://",
		"redis://h:1?wait_replicas=1&wait_replicas=2", "mem://?x=1"} {
		u, _ := url.Parse(bad)
		if _, err := dlock.Declared(u); !errors.Is(err, dlock.ErrInvalidURL) {
			t.Errorf("Declared(%s): %v, want ErrInvalidURL", bad, err)
		}
	}
	u, _ := url.Parse("redis://h:1?wait_replicas=1")
	if c, _ := dlock.Declared(u); c.FaultOutcomes[spec.Failover] != "" {
		t.Errorf("redis with wait_replicas: failover declared %q, want the default (held)", c.FaultOutcomes[spec.Failover])
	}
}
