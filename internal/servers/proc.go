package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStartTimeout bounds a start-up (or restart) when the caller's context
// has no deadline.
const DefaultStartTimeout = 60 * time.Second

// pollInterval is how often readiness checks are retried.
const pollInterval = 15 * time.Millisecond

// ErrExternal is returned by fault methods (Kill, Pause, Restart, ...) called on a
// server that this package did not start (an address from the environment).
var ErrExternal = errors.New("servers: server was not started by this process; faults need a local binary")

// ErrNotRunning is returned by Pause/Resume on a stopped server.
var ErrNotRunning = errors.New("servers: server is not running")

// MissingError reports a server binary (or library) that is not installed.
// Install holds a shell command that installs it.
type MissingError struct {
	What    string // e.g. "redis-server"
	Install string // e.g. "sudo apt-get install -y redis-server (or: make deps)"
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found; install: %s", e.What, e.Install)
}

func missing(what, pkg string) error {
	return &MissingError{What: what, Install: "sudo apt-get install -y --no-install-recommends " + pkg + " (or: make deps)"}
}

// IsMissing reports whether err says a server is not installed.
func IsMissing(err error) bool {
	var m *MissingError
	return errors.As(err, &m)
}

// NoImageError reports a server kind that runs from local binaries only (it has no
// container image here), asked for under DLOCK_SERVERS=docker, which allows
// containers only.
type NoImageError struct {
	What string // e.g. "PostgreSQL"
}

func (e *NoImageError) Error() string {
	return fmt.Sprintf("servers: %s=docker, but %s has no container image: it runs from local binaries only", EnvServers, e.What)
}

// IsNoImage reports whether err says a server kind has no container image.
func IsNoImage(err error) bool {
	var n *NoImageError
	return errors.As(err, &n)
}

// lookPath finds a binary on PATH or in the usual sbin directories (mariadbd
// lives in /usr/sbin, which is not on every PATH).
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/local/bin", "/usr/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

// handedOut holds every port freePort and freePorts have returned in this process:
// servers started in parallel (StartRedisMasters) must not be given the same port,
// which may look free again as soon as the probing listener closes — the second
// server then fails to bind while the first one answers its readiness check.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Server ports come from below the kernel's ephemeral port range
// (/proc/sys/net/ipv4/ip_local_port_range), never from it: a server that a test
// stops and starts again (a restart, a failover) binds the same port again, and
// while it is down a connection that any process opens may be given that port as
// its local port, for as long as the connection lives — the restart then fails with
// "address already in use" (an etcd restart did, during a full campaign, while
// three test packages ran at once). Below the range only an explicit bind can take
// a port, and other test processes choose theirs at random from the same range,
// each checking that it binds. Where the range leaves too few ports below it, ports
// come from the kernel (":0") as before.
const (
	lowestServerPort = 10000
	minServerPorts   = 4096
)

// serverPorts returns the range [lo, hi) server ports are chosen from, or ok false
// when there is none (then the kernel chooses).
func serverPorts() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0, 0, false
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-lowestServerPort < minServerPorts {
		return 0, 0, false
	}
	return lowestServerPort, first, true
}

// listenFree listens on a loopback port that no caller in this process has been
// given (handedOut.ports; the caller holds handedOut's lock): a random one of
// serverPorts, else one the kernel picks.
func listenFree() (net.Listener, error) {
	lo, hi, ok := serverPorts()
	for range 200 {
		addr := "127.0.0.1:0"
		if ok {
			addr = hostPort(lo + mrand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if ok {
				continue // taken: try another
			}
			return nil, err
		}
		if port := l.Addr().(*net.TCPAddr).Port; !handedOut.ports[port] {
			handedOut.ports[port] = true
			return l, nil
		}
		l.Close()
	}
	return nil, fmt.Errorf("no free loopback port that was not already handed out in 200 tries")
}

// freePort returns a loopback TCP port that was free a moment ago and that no other
// caller in this process has been given.
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct ports as freePort does.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	ports := make([]int, 0, n)
	for range n {
		l, err := listenFree()
		if err != nil {
			return nil, err
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	return ports, nil
}

func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// onFreePort starts the server that launch configures for a free loopback port and
// waits until it serves (the readiness check launch returns). When another process
// took the port between its choice and the server's bind, it tries again with
// another, three times at most. launch's error ends the attempts.
func onFreePort(ctx context.Context, launch func(port int) (*proc, func(context.Context) error, error)) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		p, ready, err := launch(port)
		if err != nil {
			return err
		}
		err = p.startReady(ctx, ready)
		if err == nil || attempt >= 3 || !p.addrInUse() {
			return err
		}
		_ = os.Remove(p.logPath)
	}
}

// poll runs check every interval until it returns true, or until ctx ends (bounded by
// DefaultStartTimeout when it has no deadline): then it returns ctx's error.
func poll(ctx context.Context, interval time.Duration, check func(ctx context.Context) bool) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for !check(ctx) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
	return nil
}

// withDefaultTimeout gives ctx a deadline when it has none.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultStartTimeout)
}

// Process is the handle every server kind this package starts shares (*Redis,
// *MySQL, *ZooKeeper and *Etcd embed it): the server's process (or container), its
// temporary directory, and the fault methods. On a server named by the environment
// (External) every fault method returns ErrExternal and Close does nothing.
type Process struct {
	p     *proc         // nil: external
	dir   string        // the temporary directory, removed by Close
	grace time.Duration // how long Stop waits after SIGTERM before it kills
	// The kind's own part of Restart: wipe removes the data (keepData false), and
	// relaunch starts the process again and waits until it serves.
	wipe     func() error
	relaunch func(ctx context.Context) error
	onClose  func() // the kind's own clean-up, after the kill; may be nil

	closed closer
}

// External reports whether the server came from the environment.
func (s *Process) External() bool { return s.p == nil }

// LogPath is the server's log file ("" for external servers).
func (s *Process) LogPath() string {
	if s.p == nil {
		return ""
	}
	return s.p.logPath
}

// Running reports whether the process is up (true for external servers).
func (s *Process) Running() bool {
	if s.p == nil {
		return true
	}
	_, _, alive := s.p.state()
	return alive
}

// Stop shuts the server down gracefully (SIGTERM, or docker stop) and waits; it
// kills the server if it has not exited after its grace period. No-op when stopped.
func (s *Process) Stop() error {
	if s.p == nil {
		return ErrExternal
	}
	return s.p.stop(s.grace)
}

// Kill sends SIGKILL to the server's process group (or docker kill) and waits until
// it is gone: a crash. No-op when stopped.
func (s *Process) Kill() error {
	if s.p == nil {
		return ErrExternal
	}
	return s.p.kill()
}

// Pause freezes the server (SIGSTOP to its process group, or docker pause) and
// returns once every thread is stopped: connections stay open, requests hang.
// ErrNotRunning when stopped.
func (s *Process) Pause() error {
	if s.p == nil {
		return ErrExternal
	}
	return s.p.pause()
}

// Resume continues a paused server (SIGCONT, or docker unpause).
func (s *Process) Resume() error {
	if s.p == nil {
		return ErrExternal
	}
	return s.p.resume()
}

// Restart stops the server if it is still running (gracefully; call Kill first to
// simulate a crash), removes its data unless keepData (what each kind keeps is in
// its doc), and starts it again on the same ports and directory, waiting until it
// serves.
func (s *Process) Restart(ctx context.Context, keepData bool) error {
	if s.p == nil {
		return ErrExternal
	}
	if err := s.p.stop(s.grace); err != nil {
		return err
	}
	if !keepData {
		if err := s.wipe(); err != nil {
			return err
		}
	}
	return s.relaunch(ctx)
}

// CPU is the processor time (user and system) the server's current process has
// used, read from /proc: for measurements of the work a store does. It is an error
// for a server in a container or one not started here.
func (s *Process) CPU() (time.Duration, error) {
	if s.p == nil {
		return 0, ErrExternal
	}
	cmd, _, alive := s.p.state()
	if !alive || cmd == nil {
		return 0, fmt.Errorf("%s: no local process to measure", s.p.name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ... utime stime: fields 14 and 15, in USER_HZ (100/s on
	// Linux); comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: /proc stat: %q", s.p.name, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * (time.Second / 100), nil
}

// Close kills the server and removes its temporary directory. Idempotent.
func (s *Process) Close() error {
	return s.closed.do(func() error {
		if s.p == nil {
			return nil
		}
		err := s.p.kill()
		if s.onClose != nil {
			s.onClose()
		}
		return joinErrs(err, os.RemoveAll(s.dir))
	})
}

// proc is one child server process, restartable with the same command line.
type proc struct {
	name    string // for messages, e.g. "redis-server 127.0.0.1:6379"
	path    string
	args    []string
	env     []string // appended to os.Environ()
	dir     string   // working directory
	logPath string   // stdout+stderr of every run, appended
	// image, when set, runs the command line in a container of this image instead
	// of on this machine (docker.go): path is then the command inside the image,
	// dir is mounted at its own path, and so are mounts (read-only).
	image  string
	mounts []string
	// ctrUser is the user its containers run as, a name or uid:gid the image
	// knows ("" for this process's user).
	ctrUser string
	// cred, when set, is the user a local process runs as (servers that refuse to
	// run as root); stopSignal, when set, is what Stop sends instead of SIGTERM.
	cred       *syscall.Credential
	stopSignal syscall.Signal

	mu      sync.Mutex
	cmd     *exec.Cmd     // the current run of a local process
	ctrID   string        // the current run of a container
	done    chan struct{} // closed when the current run has exited
	waitErr error
	paused  bool
}

// inContainer reports whether the proc runs in a container.
func (p *proc) inContainer() bool { return p.image != "" }

// start launches the process. It does not wait for readiness.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil && !isClosed(p.done) {
		return fmt.Errorf("%s: already running", p.name)
	}
	if dockerOnly() && !p.inContainer() {
		// Every server must come from its image then: a local process here is a server
		// kind that bypasses command() and would fail on a machine without the binary.
		return fmt.Errorf("servers: %s=docker, but %s was about to start as a local process (%s)", EnvServers, p.name, p.path)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	where := ""
	if p.inContainer() {
		where = " (container of " + p.image + ")"
	}
	fmt.Fprintf(logf, "\n=== %s start %s%s: %s %s\n", time.Now().Format(time.RFC3339Nano), p.name, where, p.path, strings.Join(p.args, " "))
	if p.inContainer() {
		done, err := p.startContainer(logf)
		if err != nil {
			fmt.Fprintf(logf, "=== %v\n", err)
			logf.Close()
			return err
		}
		p.done, p.paused, p.waitErr = done, false, nil
		return nil
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group (Kill/Pause hit the whole group) and SIGKILL when the
	// test binary dies, even on panic or timeout. Pdeathsig fires when the
	// forking OS thread exits, so fork from a locked thread that lives on.
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Credential = p.cred
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		logf.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.waitErr = cmd, done, false, nil
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func isClosed(c chan struct{}) bool {
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// state returns the current run's process (nil in a container), its done
// channel, and whether it is alive.
func (p *proc) state() (cmd *exec.Cmd, done chan struct{}, alive bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done, p.done != nil && !isClosed(p.done)
}

// exited returns the done channel of the current run (closed when not running).
func (p *proc) exited() <-chan struct{} {
	_, done, _ := p.state()
	if done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return done
}

func (p *proc) signalGroup(sig syscall.Signal) error {
	cmd, _, alive := p.state()
	if !alive {
		return ErrNotRunning
	}
	if _, err := signalTree(cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	return nil
}

// signalTree sends sig to the process group of pid and to every descendant of pid,
// which may have left the group (PostgreSQL's backends each start a session of
// their own). It returns the descendants it signalled. A stop or a kill first
// stops the group (a stopped parent forks no more children, and its children are
// not orphaned before they are listed), then reaches the descendants, and a kill
// the group last; other signals reach the descendants first.
func signalTree(pid int, sig syscall.Signal) ([]int, error) {
	group := func() error {
		if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return nil
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
		// Stopped, the parent cannot fork while its children are listed, nor its
		// children be orphaned before they are. A stop takes effect a moment after
		// kill(2) returns: wait for it.
		if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) && sig == syscall.SIGSTOP {
			return nil, err
		}
		for end := time.Now().Add(time.Second); !allThreadsStopped(pid) && time.Now().Before(end); {
			time.Sleep(100 * time.Microsecond) // nothing signals that a process stopped
		}
	}
	kids := descendants(pid)
	for _, k := range kids {
		_ = syscall.Kill(k, sig)
	}
	if sig == syscall.SIGSTOP {
		return kids, nil // the group is stopped already
	}
	return kids, group()
}

// descendants lists the processes below pid (children, theirs, …), from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	eachProcess(func(p int, f []string) {
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	})
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// kill sends SIGKILL to the process group and every descendant (signalTree) and
// waits until they are all gone. No-op when not running.
func (p *proc) kill() error {
	cmd, done, alive := p.state()
	if !alive {
		return nil
	}
	if p.inContainer() {
		if err := p.killContainer(); err != nil {
			return err
		}
	}
	var kids []int
	if !p.inContainer() {
		kids, _ = signalTree(cmd.Process.Pid, syscall.SIGKILL)
	}
	deadline := time.After(30 * time.Second)
	select {
	case <-done:
	case <-deadline:
		return fmt.Errorf("%s: still alive 30s after SIGKILL", p.name)
	}
	if p.inContainer() {
		return nil
	}
	// The server's own children (PostgreSQL's backends) die with it, a moment
	// later: a restart must not find them still holding its shared memory.
	for groupAlive(cmd.Process.Pid) || anyAlive(kids) {
		select {
		case <-deadline:
			return fmt.Errorf("%s: processes of its group still alive 30s after SIGKILL", p.name)
		case <-time.After(time.Millisecond): // nothing signals the end of a process we did not fork
		}
	}
	return nil
}

// anyAlive reports whether one of pids is alive (not a zombie).
func anyAlive(pids []int) bool {
	alive := false
	eachProcess(func(p int, _ []string) {
		if slices.Contains(pids, p) {
			alive = true
		}
	})
	return alive
}

// groupAlive reports whether a process of the process group pgid is alive (not a
// zombie).
func groupAlive(pgid int) bool {
	alive := false
	eachProcess(func(_ int, f []string) {
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			alive = true
		}
	})
	return alive
}

// stop sends SIGTERM (or the proc's stopSignal; and SIGCONT, in case it is paused) and waits up to
// grace for the exit, then kills.
func (p *proc) stop(grace time.Duration) error {
	cmd, done, alive := p.state()
	if !alive {
		return nil
	}
	if p.inContainer() {
		// The engine waits the grace period, then kills.
		if err := p.stopContainer(grace); err != nil {
			return err
		}
		grace = 30 * time.Second
	} else {
		sig := syscall.SIGTERM
		if p.stopSignal != 0 {
			sig = p.stopSignal
		}
		_ = syscall.Kill(cmd.Process.Pid, sig)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace):
		return p.kill()
	}
}

// pause stops the process group and the processes below it, and returns once every
// thread of the server is really stopped (SIGSTOP is asynchronous: a request sent right after
// kill(2) could otherwise still be served).
func (p *proc) pause() error {
	if p.inContainer() {
		// The freezer: the engine answers once every task of the container is frozen.
		if _, _, alive := p.state(); !alive {
			return ErrNotRunning
		}
		if err := p.pauseContainer(); err != nil {
			return err
		}
		p.mu.Lock()
		p.paused = true
		p.mu.Unlock()
		return nil
	}
	cmd, _, alive := p.state()
	if !alive {
		return ErrNotRunning
	}
	kids, err := signalTree(cmd.Process.Pid, syscall.SIGSTOP)
	if err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, syscall.SIGSTOP, err)
	}
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	stopped := func() bool {
		for _, pid := range append(kids, cmd.Process.Pid) {
			if !allThreadsStopped(pid) {
				return false
			}
		}
		return true
	}
	for !stopped() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not stopped 5s after SIGSTOP", p.name)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// allThreadsStopped reports whether every thread of pid is in state T
// (stopped) or gone.
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}

func (p *proc) resume() error {
	if p.inContainer() {
		if _, _, alive := p.state(); !alive {
			return ErrNotRunning
		}
		if err := p.resumeContainer(); err != nil {
			return err
		}
	} else if err := p.signalGroup(syscall.SIGCONT); err != nil {
		return err
	}
	p.mu.Lock()
	p.paused = false
	p.mu.Unlock()
	return nil
}

// logTail returns the last lines of the server log, for error messages.
func (p *proc) logTail() string {
	return tailFile(p.logPath, 25)
}

func tailFile(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimRight(b, "\n")
	parts := bytes.Split(b, []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return string(bytes.Join(parts, []byte("\n")))
}

// waitReady polls check until it succeeds, the process exits, or ctx ends.
func (p *proc) waitReady(ctx context.Context, check func(ctx context.Context) error) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	exited := p.exited()
	var last error
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			p.mu.Lock()
			werr := p.waitErr
			p.mu.Unlock()
			return fmt.Errorf("%s exited during start-up (%v); log %s:\n%s", p.name, werr, p.logPath, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v); log %s:\n%s", p.name, ctx.Err(), last, p.logPath, p.logTail())
		case <-t.C:
		}
	}
}

// startReady starts the process and waits for readiness; on failure the process
// is killed.
func (p *proc) startReady(ctx context.Context, check func(ctx context.Context) error) error {
	if err := p.start(); err != nil {
		return err
	}
	if err := p.waitReady(ctx, check); err != nil {
		_ = p.kill()
		return err
	}
	return nil
}

// addrInUse reports whether the last run's log says the port was taken (a race
// with another process between freePort and the server's bind).
func (p *proc) addrInUse() bool {
	t := strings.ToLower(tailFile(p.logPath, 40))
	return strings.Contains(t, "address already in use") || strings.Contains(t, "bindexception")
}

// tempDir makes a fresh temporary directory for one server.
// It is marked with this process's pid; directories of dead owners are swept.
func tempDir(kind string) (string, error) {
	sweepStale()
	d, err := os.MkdirTemp("", "dlock-"+kind+"-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(d, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(d)
		return "", err
	}
	return d, nil
}

// removeContents empties dir except for the names in keep.
func removeContents(dir string, keep ...string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
outer:
	for _, e := range ents {
		for _, k := range keep {
			if e.Name() == k {
				continue outer
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// dialCheck is a readiness check that only needs an accepting TCP port.
func dialCheck(addr string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// closer runs f once; later calls return the first result.
type closer struct {
	once sync.Once
	err  error
}

func (c *closer) do(f func() error) error {
	c.once.Do(func() { c.err = f() })
	return c.err
}

// joinErrs is errors.Join that skips nils.
func joinErrs(errs ...error) error { return errors.Join(errs...) }
