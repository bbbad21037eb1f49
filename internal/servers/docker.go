package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Servers in containers: every container runs one server's usual command line
// (the same flags, ports and paths as the local binary would get) from the
// server's image (images.go), started through the docker command (the engine at
// DOCKER_HOST, or the CLI's default), with
//   - host networking: the server binds 127.0.0.1 on the port freePort chose, so
//     clients, proxies and peers reach it exactly as a local process; no container
//     gets an address of its own, and no network is created;
//   - the server's temporary directory bind-mounted at the same path (data, logs,
//     the clock-offset file), plus read-only mounts of what else it needs (the
//     clock shim, the PKI);
//   - this process's uid:gid, so the files it leaves are the caller's to remove.
//
// Faults go through the engine: Kill is `docker kill` (SIGKILL), Stop is `docker
// stop` (SIGTERM, then SIGKILL after the grace period), Pause/Resume are `docker
// pause`/`unpause` (the cgroup freezer: every thread stopped when Pause returns, as
// with SIGSTOP), Restart starts a new container on the same directory and ports.
// A container is removed as soon as it has exited and its output is in the log
// file; a container left by a test binary that was killed is removed by the next
// one (containers carry their owner's host name and pid as labels).

// Labels on every container this package starts.
const (
	labelHost = "dlock.owner.host"
	labelPID  = "dlock.owner.pid"
)

// imagePullTimeout bounds pulling one image that the engine lacks (not part of a
// start-up's deadline: a first pull can take minutes).
const imagePullTimeout = 10 * time.Minute

// dockerCallTimeout bounds one engine call (create, kill, pause, inspect, ...).
const dockerCallTimeout = time.Minute

var engine struct {
	mu     sync.Mutex
	tried  bool
	used   bool // a container was started or looked for: Containers lists
	err    error
	images map[string]error
}

var containerSeq atomic.Int64

// docker runs the docker command with args, bounded by ctx, and returns its
// standard output, trimmed; a failure holds its standard error.
func docker(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return strings.TrimSpace(out.String()), fmt.Errorf("docker %s: %s", args[0], msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// dockerCall is docker bounded by dockerCallTimeout.
func dockerCall(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dockerCallTimeout)
	defer cancel()
	return docker(ctx, args...)
}

// dockerAvailable reports (once per process) whether the docker command is
// installed and its engine answers; the first success sweeps the stale containers
// of this host.
func dockerAvailable() error {
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if engine.tried {
		return engine.err
	}
	engine.tried = true
	if _, err := exec.LookPath("docker"); err != nil {
		engine.err = errors.New("no Docker engine answers: the docker command is not installed")
		return engine.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := docker(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		engine.err = fmt.Errorf("no Docker engine answers: %w", err)
		return engine.err
	}
	engine.images = map[string]error{}
	engine.used = true
	sweepStaleContainers()
	return nil
}

// ensureImage makes sure the engine has image, pulling it once if it lacks it.
func ensureImage(image string) error {
	if err := dockerAvailable(); err != nil {
		return err
	}
	engine.mu.Lock()
	defer engine.mu.Unlock()
	if err, ok := engine.images[image]; ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), imagePullTimeout)
	defer cancel()
	_, err := docker(ctx, "image", "inspect", "--format", "{{.Id}}", image)
	if err != nil {
		fmt.Fprintf(os.Stderr, "servers: pulling image %s (not in the Docker engine)\n", image)
		if _, perr := docker(ctx, "pull", "--quiet", image); perr != nil {
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
	out, err := dockerCall("image", "inspect", "--format", `{{.Id}} {{range .RootFS.Layers}}{{.}},{{end}}`, image)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", image, err)
	}
	id, layers, _ := strings.Cut(out, " ")
	if layers = strings.TrimSuffix(layers, ","); layers == "" {
		return id, nil
	}
	return layers, nil
}

var nameChars = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// runArgs are the arguments of `docker run` for one detached container of image
// running cmd with the host's network, as user (a name or uid:gid known to the
// image; "" for this process's user), stopped by `docker stop` with stop (0 for
// the image's default, SIGTERM), in dir (mounted read-write at its own path) with
// ro mounted read-only, labelled with its owner (labels override the owner's pid,
// for tests).
func runArgs(kind, image, user string, stop syscall.Signal, cmd, env []string, dir string, ro []string, labels ...string) (name string, args []string) {
	host, _ := os.Hostname()
	name = fmt.Sprintf("dlock-%s-%d-%d", nameChars.ReplaceAllString(kind, "-"), os.Getpid(), containerSeq.Add(1))
	if user == "" {
		user = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	}
	args = []string{"run", "--detach", "--name", name, "--network", "host",
		"--user", user, "--workdir", dir,
		"--volume", dir + ":" + dir, "--entrypoint", cmd[0],
		"--label", labelHost + "=" + host}
	if stop != 0 {
		args = append(args, "--stop-signal", strconv.Itoa(int(stop)))
	}
	if len(labels) == 0 {
		labels = []string{labelPID + "=" + strconv.Itoa(os.Getpid())}
	}
	for _, l := range labels {
		args = append(args, "--label", l)
	}
	for _, m := range ro {
		args = append(args, "--volume", m+":"+m+":ro")
	}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	return name, append(append(args, image), cmd[1:]...)
}

// startContainer runs the proc's command line in a new container of p.image; p.mu
// is held. The returned channel is closed once the container has exited, its
// output is in logf (which it closes) and it is removed.
func (p *proc) startContainer(logf *os.File) (chan struct{}, error) {
	if err := ensureImage(p.image); err != nil {
		return nil, err
	}
	kind, _, _ := strings.Cut(p.name, " ")
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStartTimeout)
	defer cancel()
	name, args := runArgs(kind, p.image, p.ctrUser, p.stopSignal, append([]string{p.path}, p.args...), p.env, p.dir, p.mounts)
	id, err := docker(ctx, args...)
	if err != nil {
		_, _ = dockerCall("rm", "--force", name) // created, perhaps, but not started
		return nil, fmt.Errorf("%s: container of %s: %w", p.name, p.image, err)
	}
	p.ctrID = id
	// Every goroutine that serves this container starts before startContainer returns
	// (a leak check that snapshots the goroutines after a server started must see them
	// all): the log follower, its waiter, and docker wait's output copiers.
	logs := exec.Command("docker", "logs", "--follow", id)
	logs.Stdout, logs.Stderr = logf, logf
	logsDone := make(chan struct{})
	if err := logs.Start(); err != nil {
		fmt.Fprintf(logf, "(container logs: %v)\n", err)
		close(logsDone)
	} else {
		go func() { _ = logs.Wait(); close(logsDone) }()
	}
	// docker wait prints the exit status once the container has stopped.
	var waitOut, waitErr bytes.Buffer
	wait := exec.Command("docker", "wait", id)
	wait.Stdout, wait.Stderr = &waitOut, &waitErr
	startErr := wait.Start()
	done := make(chan struct{})
	go func() {
		var exit error
		err := startErr
		if err == nil {
			err = wait.Wait()
		}
		out := strings.TrimSpace(waitOut.String())
		switch code, cerr := strconv.Atoi(out); {
		case err != nil:
			if msg := strings.TrimSpace(waitErr.String()); msg != "" {
				err = errors.New(msg)
			}
			exit = fmt.Errorf("docker wait: %w", err)
		case cerr != nil:
			exit = fmt.Errorf("docker wait: %q", out)
		case code != 0:
			exit = fmt.Errorf("exit status %d", code)
		}
		select {
		case <-logsDone:
		case <-time.After(5 * time.Second):
			if logs.Process != nil {
				_ = logs.Process.Kill()
			}
			<-logsDone
		}
		fmt.Fprintf(logf, "=== %s container %.12s exited (%v)\n", time.Now().Format(time.RFC3339Nano), id, exit)
		logf.Close()
		_, _ = dockerCall("rm", "--force", id)
		p.mu.Lock()
		p.waitErr = exit
		p.mu.Unlock()
		close(done)
	}()
	return done, nil
}

// containerCall runs `docker verb [args] <container>` on the proc's current
// container; an answer that says the container is gone or stopped already counts as
// done when gone is set.
func (p *proc) containerCall(gone bool, verb string, args ...string) error {
	p.mu.Lock()
	id := p.ctrID
	p.mu.Unlock()
	_, err := dockerCall(append(append([]string{verb}, args...), id)...)
	if err != nil && gone && isNotRunning(err) {
		return nil
	}
	if err != nil {
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
	return p.containerCall(true, "kill", "--signal", "SIGKILL")
}

func (p *proc) stopContainer(grace time.Duration) error {
	p.unpauseFirst()
	secs := int((grace + time.Second - 1) / time.Second)
	return p.containerCall(true, "stop", "-t", strconv.Itoa(secs))
}

func (p *proc) pauseContainer() error { return p.containerCall(false, "pause") }

func (p *proc) resumeContainer() error { return p.containerCall(false, "unpause") }

// isNotRunning reports an engine error saying the container is gone or stopped
// already (it exited, or is being removed).
func isNotRunning(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "is not running") || strings.Contains(s, "no such container") ||
		strings.Contains(s, "removal of container") || strings.Contains(s, "not found")
}

// runContainerOnce runs cmd to its end in a container of image as user (see
// runArgs; host network; the working directory dir mounted read-write) and returns
// its output; a non-zero exit is an error holding the output's tail.
func runContainerOnce(ctx context.Context, kind, image, user string, cmd []string, dir string) (string, error) {
	if err := ensureImage(image); err != nil {
		return "", err
	}
	what := strings.Join(cmd, " ") + " in a container of " + image
	name, args := runArgs(kind, image, user, 0, cmd, nil, dir, nil)
	id, err := docker(ctx, args...)
	defer func() { _, _ = dockerCall("rm", "--force", name) }()
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	status, err := docker(ctx, "wait", id)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	var out bytes.Buffer
	logs := exec.CommandContext(ctx, "docker", "logs", id)
	logs.Stdout, logs.Stderr = &out, &out
	_ = logs.Run()
	if status != "0" {
		return out.String(), fmt.Errorf("%s: exit status %s\n%s", what, status, tail(out.String(), 25))
	}
	return out.String(), nil
}

// ownContainers lists the containers this package started in this process (or, with
// pid 0, on this host by any process): id and owner pid.
func ownContainers(pid int) (map[string]int, error) {
	host, _ := os.Hostname()
	args := []string{"ps", "--all", "--no-trunc", "--filter", "label=" + labelHost + "=" + host}
	if pid != 0 {
		args = append(args, "--filter", "label="+labelPID+"="+strconv.Itoa(pid))
	}
	out, err := dockerCall(append(args, "--format", `{{.ID}} {{.Label "`+labelPID+`"}}`)...)
	if err != nil {
		return nil, err
	}
	cs := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		id, owner, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		cs[id], _ = strconv.Atoi(owner)
	}
	return cs, nil
}

// sweepStaleContainers removes the containers of this host whose owner process is
// gone (a test binary that was killed before it could close its servers).
func sweepStaleContainers() {
	cs, err := ownContainers(0)
	if err != nil {
		return
	}
	for id, pid := range cs {
		if pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_, _ = dockerCall("rm", "--force", id)
		}
	}
}

// Containers lists the containers this process started that still exist (their
// ids), and removes them when remove is set. After every server is closed the list
// should be empty; servertest.Finish checks that nothing leaked. It returns nothing
// when no Docker engine was used.
func Containers(remove bool) []string {
	engine.mu.Lock()
	used := engine.used
	engine.mu.Unlock()
	if !used {
		return nil
	}
	cs, err := ownContainers(os.Getpid())
	if err != nil {
		return []string{"(listing containers: " + err.Error() + ")"}
	}
	var out []string
	for id := range cs {
		out = append(out, id[:min(12, len(id))])
		if remove {
			_, _ = dockerCall("rm", "--force", id)
		}
	}
	return out
}
