package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
)

// Servers in containers: every container runs one server's usual command line
// (the same flags, ports and paths as the local binary would get) from the
// server's image (images.go), started through testcontainers-go, with
//   - host networking: the server binds 127.0.0.1 on the port freePort chose, so
//     clients, proxies and peers reach it exactly as a local process; no container
//     gets an address of its own, and no network is created;
//   - the server's temporary directory bind-mounted at the same path (data, logs,
//     the clock-offset file), plus read-only mounts of what else it needs (the
//     clock shim);
//   - this process's uid:gid, so the files it leaves are the caller's to remove.
//
// Faults go through the engine: Kill is `docker kill` (SIGKILL), Stop is `docker
// stop` (SIGTERM, then SIGKILL after the grace period), Pause/Resume are `docker
// pause`/`unpause` (the cgroup freezer: every thread stopped when Pause returns, as
// with SIGSTOP), Restart starts a new container on the same directory and ports.
// A container is removed as soon as it has exited and its output is in the log
// file. Ryuk (testcontainers' reaper container) is disabled unless the caller set
// TESTCONTAINERS_RYUK_DISABLED: this package removes its own containers, and a
// container left by a test binary that was killed is removed by the next one
// (containers carry their owner's host name and pid as labels).

// Labels on every container this package starts.
const (
	labelHost = "dlock.owner.host"
	labelPID  = "dlock.owner.pid"
)

// imagePullTimeout bounds pulling one image that the engine lacks (not part of a
// start-up's deadline: a first pull can take minutes).
const imagePullTimeout = 10 * time.Minute

var engine struct {
	mu     sync.Mutex
	tried  bool
	err    error
	prov   *testcontainers.DockerProvider
	cli    client.APIClient
	images map[string]error
}

var containerSeq atomic.Int64

// dockerAvailable connects to the Docker engine (once per process: DOCKER_HOST,
// the testcontainers configuration, or the default socket) and reports whether it
// answers.
func dockerAvailable() error {
	_, _, err := dockerEngine()
	return err
}

func dockerEngine() (*testcontainers.DockerProvider, client.APIClient, error) {
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if engine.tried {
		return engine.prov, engine.cli, engine.err
	}
	engine.tried = true
	if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
		os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	}
	quiet := tclog.NewNoopLogger()
	tclog.SetDefault(quiet)
	type result struct {
		prov *testcontainers.DockerProvider
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		// "host" as the default network: testcontainers would otherwise create a
		// bridge network when the engine has none (dockerd --bridge=none).
		p, err := testcontainers.NewDockerProvider(testcontainers.WithDefaultBridgeNetwork("host"), testcontainers.WithLogger(quiet))
		ch <- result{p, err}
	}()
	select {
	case r := <-ch:
		engine.prov, engine.err = r.prov, r.err
	case <-time.After(15 * time.Second):
		engine.err = errors.New("no answer in 15s")
	}
	if engine.err != nil {
		engine.err = fmt.Errorf("no Docker engine answers: %w", engine.err)
		return nil, nil, engine.err
	}
	engine.cli = engine.prov.Client()
	engine.images = map[string]error{}
	sweepStaleContainers(engine.cli)
	return engine.prov, engine.cli, nil
}

// closeDocker drops the engine connection's idle sockets (the engine stays usable).
func closeDocker() {
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if engine.cli != nil {
		engine.cli.Close()
	}
}

// ensureImage makes sure the engine has image, pulling it once if it lacks it.
func ensureImage(image string) error {
	prov, cli, err := dockerEngine()
	if err != nil {
		return err
	}
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if err, ok := engine.images[image]; ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), imagePullTimeout)
	defer cancel()
	if _, err = cli.ImageInspect(ctx, image); err != nil {
		fmt.Fprintf(os.Stderr, "servers: pulling image %s (not in the Docker engine)\n", image)
		if perr := prov.PullImage(ctx, image); perr != nil {
			err = fmt.Errorf("image %s is not in the Docker engine and pulling it failed: %w (build or load it, or point %s at another image)",
				image, perr, imageVarOf(image))
		} else {
			err = nil
		}
	}
	engine.images[image] = err
	return err
}

// imageVarOf names the variables that may have chosen image, for messages.
func imageVarOf(image string) string {
	var vs []string
	for _, i := range []Image{RedisImage, MariaDBImage, ZooKeeperImage, EtcdImage} {
		if i.Name() == image {
			vs = append(vs, i.Env)
		}
	}
	if len(vs) == 0 {
		return "the DLOCK_*_IMAGE variables"
	}
	return strings.Join(vs, ", ")
}

// imageContent identifies what image holds (pulled first if it is absent): its
// layers' content digests, which stay the same when the same tar is imported again
// (the image id of `docker import` does not: it includes the import time).
func imageContent(image string) (string, error) {
	if err := ensureImage(image); err != nil {
		return "", err
	}
	_, cli, err := dockerEngine()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", image, err)
	}
	if len(res.RootFS.Layers) == 0 {
		return res.ID, nil
	}
	return strings.Join(res.RootFS.Layers, ","), nil
}

var nameChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// containerRequest is the request for one container of image running cmd with the
// host's network, dir (read-write) and ro (read-only) mounted at their own paths.
func containerRequest(kind, image string, cmd, env []string, dir string, ro []string) testcontainers.ContainerRequest {
	envMap := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	binds := []string{dir + ":" + dir}
	for _, m := range ro {
		binds = append(binds, m+":"+m+":ro")
	}
	host, _ := os.Hostname()
	return testcontainers.ContainerRequest{
		Image:      image,
		Entrypoint: cmd[:1],
		Cmd:        cmd[1:],
		Env:        envMap,
		Name: fmt.Sprintf("dlock-%s-%d-%d", nameChars.ReplaceAllString(kind, "-"), os.Getpid(),
			containerSeq.Add(1)),
		Labels: map[string]string{labelHost: host, labelPID: strconv.Itoa(os.Getpid())},
		ConfigModifier: func(c *container.Config) {
			c.User = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
			c.WorkingDir = dir
		},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.Binds = binds
		},
	}
}

// startContainer runs the proc's command line in a new container of p.image; p.mu
// is held. The returned channel is closed once the container has exited, its
// output is in logf (which it closes) and it is removed.
func (p *proc) startContainer(logf *os.File) (chan struct{}, error) {
	if err := ensureImage(p.image); err != nil {
		return nil, err
	}
	prov, cli, err := dockerEngine()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
	defer cancel()
	kind, _, _ := strings.Cut(p.name, " ")
	req := containerRequest(kind, p.image, append([]string{p.path}, p.args...), p.env, p.dir, p.mounts)
	c, err := prov.CreateContainer(ctx, req)
	if err == nil {
		err = c.Start(ctx)
	}
	if err != nil {
		if c != nil {
			_, _ = cli.ContainerRemove(ctx, c.GetContainerID(), client.ContainerRemoveOptions{Force: true})
		}
		return nil, fmt.Errorf("%s: container of %s: %w", p.name, p.image, err)
	}
	id := c.GetContainerID()
	p.ctrID = id
	done := make(chan struct{})
	go func() {
		bg := context.Background()
		logsDone := make(chan struct{})
		go func() {
			defer close(logsDone)
			rc, err := cli.ContainerLogs(bg, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
			if err != nil {
				fmt.Fprintf(logf, "(container logs: %v)\n", err)
				return
			}
			defer rc.Close()
			_, _ = stdcopy.StdCopy(logf, logf, rc)
		}()
		w := cli.ContainerWait(bg, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		var exit error
		select {
		case r := <-w.Result:
			if r.StatusCode != 0 {
				exit = fmt.Errorf("exit status %d", r.StatusCode)
			}
		case err := <-w.Error:
			exit = err
		}
		select {
		case <-logsDone:
		case <-time.After(5 * time.Second):
		}
		fmt.Fprintf(logf, "=== %s container %.12s exited (%v)\n", time.Now().Format(time.RFC3339Nano), id, exit)
		logf.Close()
		rctx, rcancel := context.WithTimeout(bg, 30*time.Second)
		_, _ = cli.ContainerRemove(rctx, id, client.ContainerRemoveOptions{Force: true})
		rcancel()
		p.mu.Lock()
		p.waitErr = exit
		p.mu.Unlock()
		close(done)
	}()
	return done, nil
}

// containerCall runs one engine call on the proc's current container.
func (p *proc) containerCall(f func(ctx context.Context, cli client.APIClient, id string) error) error {
	_, cli, err := dockerEngine()
	if err != nil {
		return err
	}
	p.mu.Lock()
	id := p.ctrID
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f(ctx, cli, id); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// unpauseFirst thaws a paused container: the engine neither stops nor kills a
// frozen one.
func (p *proc) unpauseFirst() {
	p.mu.Lock()
	paused := p.paused
	p.mu.Unlock()
	if paused {
		_ = p.resume()
	}
}

func (p *proc) killContainer() error {
	p.unpauseFirst()
	return p.containerCall(func(ctx context.Context, cli client.APIClient, id string) error {
		_, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"})
		if err != nil && isNotRunning(err) {
			return nil
		}
		return err
	})
}

func (p *proc) stopContainer(grace time.Duration) error {
	p.unpauseFirst()
	secs := int((grace + time.Second - 1) / time.Second)
	return p.containerCall(func(ctx context.Context, cli client.APIClient, id string) error {
		_, err := cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs})
		if err != nil && isNotRunning(err) {
			return nil
		}
		return err
	})
}

func (p *proc) pauseContainer() error {
	return p.containerCall(func(ctx context.Context, cli client.APIClient, id string) error {
		_, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		return err
	})
}

func (p *proc) resumeContainer() error {
	return p.containerCall(func(ctx context.Context, cli client.APIClient, id string) error {
		_, err := cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	})
}

// isNotRunning reports an engine error saying the container is gone or stopped
// already (it exited, or is being removed).
func isNotRunning(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "is not running") || strings.Contains(s, "no such container") ||
		strings.Contains(s, "removal of container") || strings.Contains(s, "not found")
}

// runContainerOnce runs cmd to its end in a container of image (host network; rw
// and the working directory dir mounted read-write) and returns its output; a
// non-zero exit is an error holding the output's tail.
func runContainerOnce(ctx context.Context, kind, image string, cmd []string, dir string) (string, error) {
	if err := ensureImage(image); err != nil {
		return "", err
	}
	prov, cli, err := dockerEngine()
	if err != nil {
		return "", err
	}
	req := containerRequest(kind, image, cmd, nil, dir, nil)
	c, err := prov.CreateContainer(ctx, req)
	if err == nil {
		err = c.Start(ctx)
	}
	if c != nil {
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = cli.ContainerRemove(rctx, c.GetContainerID(), client.ContainerRemoveOptions{Force: true})
		}()
	}
	if err != nil {
		return "", fmt.Errorf("%s in a container of %s: %w", strings.Join(cmd, " "), image, err)
	}
	w := cli.ContainerWait(ctx, c.GetContainerID(), client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	var code int64
	select {
	case r := <-w.Result:
		code = r.StatusCode
	case err := <-w.Error:
		return "", fmt.Errorf("%s in a container of %s: %w", strings.Join(cmd, " "), image, err)
	}
	var out strings.Builder
	if rc, err := cli.ContainerLogs(ctx, c.GetContainerID(), client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}); err == nil {
		_, _ = stdcopy.StdCopy(&out, &out, rc)
		rc.Close()
	}
	if code != 0 {
		return out.String(), fmt.Errorf("%s in a container of %s: exit status %d\n%s", strings.Join(cmd, " "), image, code, tail(out.String(), 25))
	}
	return out.String(), nil
}

// ownContainers lists the containers this package started in this process (or, with
// pid 0, on this host by any process): name and owner pid.
func ownContainers(ctx context.Context, cli client.APIClient, pid int) (map[string]int, error) {
	host, _ := os.Hostname()
	f := client.Filters{}
	f = f.Add("label", labelHost+"="+host)
	if pid != 0 {
		f = f.Add("label", labelPID+"="+strconv.Itoa(pid))
	}
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, c := range res.Items {
		owner, _ := strconv.Atoi(c.Labels[labelPID])
		out[c.ID] = owner
	}
	return out, nil
}

// sweepStaleContainers removes the containers of this host whose owner process is
// gone (a test binary that was killed before it could close its servers).
func sweepStaleContainers(cli client.APIClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := ownContainers(ctx, cli, 0)
	if err != nil {
		return
	}
	for id, pid := range cs {
		if pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_, _ = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		}
	}
}

// Containers lists the containers this process started that still exist (their
// ids), and removes them when remove is set. After every server is closed the list
// should be empty; servertest.Finish checks that nothing leaked. It returns nothing
// when no Docker engine was used.
func Containers(remove bool) []string {
	engine.mu.Lock()
	cli := engine.cli
	engine.mu.Unlock()
	if cli == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer cli.Close() // its idle connections: nothing may be left running
	cs, err := ownContainers(ctx, cli, os.Getpid())
	if err != nil {
		return []string{"(listing containers: " + err.Error() + ")"}
	}
	var out []string
	for id := range cs {
		out = append(out, id[:min(12, len(id))])
		if remove {
			_, _ = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
		}
	}
	return out
}
