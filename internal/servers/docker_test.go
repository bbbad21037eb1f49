package servers

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// needEngine skips t without a Docker engine, unless DLOCK_SERVERS=docker asks for
// one: then it fails.
func needEngine(t *testing.T) {
	t.Helper()
	if err := dockerAvailable(); err != nil {
		if dockerOnly() {
			t.Fatalf("%s=docker: %v", EnvServers, err)
		}
		// CI runs these under DLOCK_SERVERS=docker (make test-docker), where this fails.
		t.Skipf("no Docker engine: %v; install and run one: make deps-docker, then scripts/dockerd.sh env %s=docker go test ./internal/servers/", err, EnvServers)
	}
}

// inspect is `docker inspect --format format id`.
func inspect(t *testing.T, id, format string) string {
	t.Helper()
	out, err := dockerCall("inspect", "--format", format, id)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSourceFor(t *testing.T) {
	missingBin := func() error { return missing("redis-server", "redis-server") }
	installed := func() error { return nil }

	t.Setenv(EnvServers, "podman")
	if _, err := sourceFor("redis-server", installed); err == nil || !strings.Contains(err.Error(), EnvServers+`="podman"`) {
		t.Fatalf("unknown %s: %v, want an error naming the variable and the value", EnvServers, err)
	}

	t.Setenv(EnvServers, "local")
	if _, err := sourceFor("redis-server", missingBin); !IsMissing(err) {
		t.Fatalf("local, binary missing: %v, want a *MissingError", err)
	}
	if src, err := sourceFor("redis-server", installed); err != nil || src != fromLocal {
		t.Fatalf("local, installed: %v, %v", src, err)
	}

	for _, v := range []string{"", "auto"} {
		t.Setenv(EnvServers, v)
		if src, err := sourceFor("redis-server", installed); err != nil || src != fromLocal {
			t.Fatalf("%s=%q, installed: %v, %v; want the local binary", EnvServers, v, src, err)
		}
		src, err := sourceFor("redis-server", missingBin)
		if dockerAvailable() == nil {
			if err != nil || src != fromDocker {
				t.Fatalf("%s=%q, binary missing, engine there: %v, %v; want a container", EnvServers, v, src, err)
			}
		} else if !IsMissing(err) || !strings.Contains(err.Error(), "or start a Docker engine") {
			t.Fatalf("%s=%q, binary missing, no engine: %v; want a *MissingError naming both ways", EnvServers, v, err)
		}
	}

	t.Setenv(EnvServers, "docker")
	src, err := sourceFor("redis-server", installed)
	if dockerAvailable() == nil {
		if err != nil || src != fromDocker {
			t.Fatalf("docker, engine there: %v, %v; want a container even with the binary installed", src, err)
		}
	} else if err == nil || IsMissing(err) {
		t.Fatalf("docker without an engine: %v; want a failure (not a skip)", err)
	}
}

// TestContainerLoopbackOnly: a server in a container has the host's network and no
// address of its own, binds 127.0.0.1 only, runs as this process's user, and is gone
// (no container left) once closed.
func TestContainerLoopbackOnly(t *testing.T) {
	needEngine(t)
	t.Setenv(EnvServers, "docker")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	before := len(Containers(false)) // other tests' servers
	r, err := StartRedis(ctx, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.p.inContainer() {
		t.Fatalf("%s=docker started a local redis-server", EnvServers)
	}
	if mode := inspect(t, r.p.ctrID, "{{.HostConfig.NetworkMode}}"); mode != "host" {
		t.Errorf("network mode %q, want host", mode)
	}
	nets := inspect(t, r.p.ctrID, `{{range $name, $ep := .NetworkSettings.Networks}}{{$name}}={{$ep.IPAddress}}/{{$ep.GlobalIPv6Address}} {{end}}`)
	if nets != "host=/" {
		t.Errorf("networks %q: want only the host's network, no address of its own", nets)
	}
	if user, want := inspect(t, r.p.ctrID, "{{.Config.User}}"), strconv.Itoa(os.Getuid())+":"+strconv.Itoa(os.Getgid()); user != want {
		t.Errorf("user %q, want %q", user, want)
	}
	bind, err := r.Do(ctx, "CONFIG", "GET", "bind")
	if err != nil || !regexp.MustCompile(`^bind\n127\.0\.0\.1$`).MatchString(bind) {
		t.Errorf("CONFIG GET bind = %q, %v; want 127.0.0.1 only", bind, err)
	}
	if left := Containers(false); len(left) != before+1 {
		t.Errorf("containers of this process while one more server runs: %v, want %d", left, before+1)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left := Containers(false); len(left) != before {
		t.Errorf("containers after Close: %v, want %d (the container is removed)", left, before)
	}
}

// TestSweepStaleContainers: a container whose owner process is gone (a test binary
// that was killed) is removed by the next process that uses the engine; one whose
// owner lives is left alone.
func TestSweepStaleContainers(t *testing.T) {
	needEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := func(owner int) string {
		if err := ensureImage(RedisImage.Name()); err != nil {
			t.Fatal(err)
		}
		name, args := runArgs("sweep-test", RedisImage.Name(), "", 0, []string{"sleep", "300"}, nil, dir, nil, labelPID+"="+strconv.Itoa(owner))
		id, err := docker(ctx, args...)
		t.Cleanup(func() { _, _ = dockerCall("rm", "--force", name) })
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	stale := start(dead.Process.Pid)
	live := start(os.Getpid())
	sweepStaleContainers()
	exists := func(id string) bool {
		_, err := dockerCall("inspect", "--format", "{{.Id}}", id)
		return err == nil
	}
	if exists(stale) {
		t.Errorf("the container of dead process %d is still there after the sweep", dead.Process.Pid)
	}
	if !exists(live) {
		t.Errorf("the sweep removed a container of this (live) process")
	}
	if left := Containers(false); !slices.Contains(left, live[:12]) {
		t.Errorf("Containers(false) = %v, want it to list this process's container %.12s", left, live)
	}
}

// TestComposeImages: compose/docker-compose.yml names the same images (and ZooKeeper
// class path) as images.go, through the same variables: the defaults live in
// images.go, and the compose file must agree with them.
func TestComposeImages(t *testing.T) {
	b, err := os.ReadFile("../../compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, i := range []Image{RedisImage, MariaDBImage, ZooKeeperImage, ZooKeeperClassPath, EtcdImage} {
		want[i.Env] = i.Default
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{(DLOCK_[A-Z_]+):-([^}]*)\}`).FindAllStringSubmatch(string(b), -1) {
		v, def := m[1], m[2]
		w, ok := want[v]
		switch {
		case !ok:
			t.Errorf("compose file: ${%s:-%s}: internal/servers has no such setting", v, def)
		case def != w:
			t.Errorf("compose file: ${%s:-%s}, but images.go's default is %q", v, def, w)
		}
		seen[v] = true
	}
	for v := range want {
		if !seen[v] {
			t.Errorf("compose file never uses %s", v)
		}
	}
}
