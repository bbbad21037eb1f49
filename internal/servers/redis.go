package servers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RedisOptions configures a Redis server started by StartRedis.
type RedisOptions struct {
	// AOF is the append-only-file fsync policy: "" (persistence off, the
	// default: --save "" --appendonly no), "everysec" or "always".
	AOF string
	// FakeTimeOffset shifts the server's wall clock by this relative offset
	// (libfaketime syntax: "+30s", "-2m", "+1.5h"; "+0" gives a real clock that
	// ShiftClock can move later). Empty: real clock. The shift is done by a
	// small LD_PRELOAD shim compiled from csrc/clockshim.c with cc (libfaketime
	// deadlocks with jemalloc, which Debian's redis-server uses), or by
	// libfaketime when no C compiler is available and the binary allows it.
	// Monotonic clocks are not shifted.
	FakeTimeOffset string
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	Args []string
	// TLS makes the server speak TLS only (no plain port), with the PKI's server
	// certificate, and require clients to present a certificate its CA signed.
	TLS *PKI
	// Password is the default user's password (requirepass). Do and the readiness
	// checks authenticate with it.
	Password string
}

// Redis is one redis-server. Handles made from an environment address (see
// SharedRedis) are external: their fault methods return ErrExternal. Stop is a
// SIGTERM (the AOF is flushed); Restart(keepData false) empties the data directory
// but for the cluster membership file (nodes.conf); a replica that was not promoted
// replicates again after a Restart.
type Redis struct {
	Process // temp root: data/, redis.log, faketime
	addr    string
	port    int
	opts    RedisOptions

	cluster bool

	mu       sync.Mutex
	fake     *fakeClock    // nil: real clock
	clock    time.Duration // current fake offset
	master   *Redis        // replicas: their master
	link     *Proxy        // replicas: the replication link (replica -> link -> master)
	promoted bool
}

func (r *Redis) dataDir() string { return filepath.Join(r.dir, "data") }

// Addr is host:port.
func (r *Redis) Addr() string { return r.addr }

func externalRedis(addr string) *Redis { return &Redis{addr: addr} }

func redisBinary() (string, error) {
	p, err := lookPath("redis-server")
	if err != nil {
		return "", missing("redis-server", "redis-server")
	}
	return p, nil
}

// StartRedis starts a redis-server on a free loopback port in a temporary
// directory and waits until it answers PING.
func StartRedis(ctx context.Context, o RedisOptions) (*Redis, error) {
	return startRedis(ctx, o, false, "")
}

func startRedis(ctx context.Context, o RedisOptions, cluster bool, replicaOf string) (*Redis, error) {
	switch o.AOF {
	case "", "everysec", "always":
	default:
		return nil, fmt.Errorf("servers: RedisOptions.AOF %q: want \"\", \"everysec\" or \"always\"", o.AOF)
	}
	bin, image, err := command("redis-server", RedisImage, redisBinary)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("redis")
	if err != nil {
		return nil, err
	}
	r := &Redis{Process: Process{dir: dir, grace: 15 * time.Second}, opts: o, cluster: cluster}
	r.wipe = func() error { return removeContents(r.dataDir(), "nodes.conf") }
	r.relaunch = r.relaunchProcess
	r.onClose = func() {
		r.mu.Lock()
		link := r.link
		r.mu.Unlock()
		if link != nil {
			link.Close()
		}
	}
	var env, mounts []string
	if o.FakeTimeOffset != "" {
		d, spec, err := parseFakeOffset(o.FakeTimeOffset)
		if err == nil {
			r.fake, env, mounts, err = newFakeClock(bin, image, dir, d, spec)
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		r.clock = d
	}
	if err := os.MkdirAll(r.dataDir(), 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	err = onFreePort(ctx, func(port int) (*proc, func(context.Context) error, error) {
		r.port, r.addr = port, hostPort(port)
		r.p = &proc{
			name:    "redis-server " + r.addr,
			path:    bin,
			dir:     dir,
			env:     env,
			logPath: filepath.Join(dir, "redis.log"),
			image:   image,
			mounts:  append(mounts, o.TLS.mounts()...),
		}
		r.p.args = r.args(replicaOf)
		return r.p, r.ready, nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if o.FakeTimeOffset != "" {
		if err := r.waitClock(ctx, r.clock); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

func (r *Redis) args(replicaOf string) []string {
	a := []string{
		"--bind", "127.0.0.1",
		"--dir", r.dataDir(),
		"--daemonize", "no",
		"--logfile", "",
		"--save", "",
		"--shutdown-timeout", "0",
		"--repl-diskless-sync-delay", "0",
	}
	if t := r.opts.TLS; t != nil {
		a = append(a, "--port", "0", "--tls-port", strconv.Itoa(r.port),
			"--tls-cert-file", t.ServerCert, "--tls-key-file", t.ServerKey, "--tls-ca-cert-file", t.CAFile,
			"--tls-auth-clients", "yes", "--tls-replication", "yes", "--tls-cluster", "yes")
	} else {
		a = append(a, "--port", strconv.Itoa(r.port))
	}
	if r.opts.Password != "" {
		a = append(a, "--requirepass", r.opts.Password, "--masterauth", r.opts.Password)
	}
	if r.opts.AOF == "" {
		a = append(a, "--appendonly", "no")
	} else {
		a = append(a, "--appendonly", "yes", "--appendfsync", r.opts.AOF)
	}
	if r.cluster {
		a = append(a, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
	}
	if replicaOf != "" {
		host, port, _ := strings.Cut(replicaOf, ":")
		a = append(a, "--replicaof", host, port)
	}
	return append(a, r.opts.Args...)
}

// ready succeeds once the server answers PING (not -LOADING).
func (r *Redis) ready(ctx context.Context) error {
	s, err := r.do(ctx, "PING")
	if err != nil {
		return err
	}
	if s != "PONG" {
		return fmt.Errorf("PING: %q", s)
	}
	return nil
}

// Do sends one command on a fresh connection and returns the reply as text
// (see the package doc). It is meant for set-up and checks, not for load.
func (r *Redis) Do(ctx context.Context, args ...string) (string, error) {
	return r.do(ctx, args...)
}

// do sends one command as the server's administrator: over TLS with the PKI's
// client certificate, authenticated with RedisOptions.Password.
func (r *Redis) do(ctx context.Context, args ...string) (string, error) {
	c := respClient{password: r.opts.Password}
	if r.opts.TLS != nil {
		c.tls = r.opts.TLS.ClientTLS()
	}
	return respDoAs(ctx, c, r.addr, args...)
}

// relaunchProcess starts a stopped server again (Restart): a replica that was not
// promoted replicates again, and a shifted clock is waited for.
func (r *Redis) relaunchProcess(ctx context.Context) error {
	r.mu.Lock()
	replicaOf := ""
	if r.link != nil && !r.promoted {
		replicaOf = r.link.Addr()
	}
	clock := r.clock
	r.mu.Unlock()
	r.p.args = r.args(replicaOf)
	if err := r.p.startReady(ctx, r.ready); err != nil {
		return err
	}
	if r.opts.FakeTimeOffset != "" {
		return r.waitClock(ctx, clock)
	}
	return nil
}

// ShiftClock sets the server's wall-clock offset from the real clock, e.g.
// "+60s" (an absolute offset, not added to the previous one) and waits until
// the server's TIME shows it. The server must have been started with a
// FakeTimeOffset (use "+0" for a real clock that can be shifted later).
func (r *Redis) ShiftClock(ctx context.Context, offset string) error {
	if r.p == nil {
		return ErrExternal
	}
	if r.fake == nil {
		return errors.New("servers: ShiftClock needs a Redis started with RedisOptions.FakeTimeOffset (e.g. \"+0\")")
	}
	d, spec, err := parseFakeOffset(offset)
	if err != nil {
		return err
	}
	r.mu.Lock()
	jump := d - r.clock
	r.mu.Unlock()
	// A probe key that expires halfway through a forward jump: once it is gone, the
	// clock Redis expires keys by has moved too (TIME reads the clock at once; key
	// expiry uses a time Redis caches).
	probe := fmt.Sprintf("dlock:clockprobe:%d", time.Now().UnixNano())
	if jump >= 2*time.Second {
		if _, err := respDo(ctx, r.addr, "SET", probe, "1", "PX", fmt.Sprint((jump / 2).Milliseconds())); err != nil {
			return err
		}
	}
	if err := r.fake.set(d, spec); err != nil {
		return err
	}
	r.mu.Lock()
	r.clock = d
	r.mu.Unlock()
	if err := r.waitClock(ctx, d); err != nil {
		return err
	}
	for jump >= 2*time.Second {
		ttl, err := respDo(ctx, r.addr, "PTTL", probe)
		if err != nil {
			return err
		}
		if ttl == "-2" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("servers: redis %s: keys do not expire by the shifted clock: %w", r.addr, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// ClockOffset returns the server's clock minus the local clock, measured with
// the TIME command.
func (r *Redis) ClockOffset(ctx context.Context) (time.Duration, error) {
	before := time.Now()
	s, err := r.do(ctx, "TIME")
	after := time.Now()
	if err != nil {
		return 0, err
	}
	secs, usecs, ok := strings.Cut(s, "\n")
	if !ok {
		return 0, fmt.Errorf("TIME: %q", s)
	}
	sec, err1 := strconv.ParseInt(secs, 10, 64)
	usec, err2 := strconv.ParseInt(usecs, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("TIME: %q", s)
	}
	server := time.Unix(sec, usec*1000)
	mid := before.Add(after.Sub(before) / 2)
	return server.Sub(mid), nil
}

// waitClock polls TIME until the server's offset is want (±500ms).
func (r *Redis) waitClock(ctx context.Context, want time.Duration) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var got time.Duration
	var err error
	for {
		got, err = r.ClockOffset(ctx)
		if err == nil && math.Abs(float64(got-want)) < float64(500*time.Millisecond) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis %s: clock offset is %v (err %v), want %v: %w", r.addr, got, err, want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StartRedisMasters starts n independent Redis masters in parallel (Redlock).
func StartRedisMasters(ctx context.Context, n int) ([]*Redis, error) {
	rs := make([]*Redis, n)
	err := parallel(n, func(i int) error {
		r, err := StartRedis(ctx, RedisOptions{})
		rs[i] = r
		return err
	})
	if err != nil {
		closeAll(rs)
		return nil, err
	}
	return rs, nil
}

func closeAll[T interface{ Close() error }](xs []T) {
	for _, x := range xs {
		if any(x) != nil && !isNilPtr(x) {
			x.Close()
		}
	}
}

func isNilPtr(x any) bool {
	switch v := x.(type) {
	case *Redis:
		return v == nil
	case *ZooKeeper:
		return v == nil
	case *Etcd:
		return v == nil
	case *MySQL:
		return v == nil
	}
	return false
}

// parallel runs f(0..n-1) concurrently and returns the errors joined.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StartRedisReplicaPair starts a master and a replica of it. The replica
// replicates through an in-process Proxy, so PauseReplication can hold the
// stream back (the replica falls behind while both stay up) and
// ResumeReplication lets it catch up. It returns once the replica is in sync.
func StartRedisReplicaPair(ctx context.Context) (master, replica *Redis, err error) {
	master, err = StartRedis(ctx, RedisOptions{})
	if err != nil {
		return nil, nil, err
	}
	link, err := NewProxy(master.Addr())
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	replica, err = startRedis(ctx, RedisOptions{}, false, link.Addr())
	if err != nil {
		link.Close()
		master.Close()
		return nil, nil, err
	}
	replica.master, replica.link = master, link
	if err := replica.WaitInSync(ctx); err != nil {
		replica.Close()
		master.Close()
		return nil, nil, err
	}
	return master, replica, nil
}

// Master returns the master of a replica (nil for a master).
func (r *Redis) Master() *Redis { return r.master }

// Link returns the replication link proxy of a replica (nil for a master).
func (r *Redis) Link() *Proxy { return r.link }

func (r *Redis) replicaOnly() error {
	if r.link == nil {
		return errors.New("servers: not a replica started by StartRedisReplicaPair")
	}
	return nil
}

// PauseReplication holds the replication stream back in the link proxy: the
// master keeps accepting writes and the replica keeps serving reads, but the
// replica no longer receives the writes (nor does the master receive acks).
func (r *Redis) PauseReplication() error {
	if err := r.replicaOnly(); err != nil {
		return err
	}
	r.link.Stall()
	return nil
}

// ResumeReplication releases the held stream and waits until the replica has
// caught up with the master.
func (r *Redis) ResumeReplication(ctx context.Context) error {
	if err := r.replicaOnly(); err != nil {
		return err
	}
	r.link.Restore()
	return r.WaitInSync(ctx)
}

// WaitInSync waits until the replica's link is up and it has processed every
// write the master had when WaitInSync was called.
func (r *Redis) WaitInSync(ctx context.Context) error {
	if err := r.replicaOnly(); err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	minfo, err := r.master.do(ctx, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("master INFO: %w", err)
	}
	want, _ := strconv.ParseInt(infoField(minfo, "master_repl_offset"), 10, 64)
	var last string
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		info, err := r.do(ctx, "INFO", "replication")
		if err != nil {
			return false
		}
		last = info
		got, _ := strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64)
		return infoField(info, "master_link_status") == "up" && got >= want
	}); err != nil {
		return fmt.Errorf("replica %s not in sync (want offset %d): %w\n%s", r.addr, want, err, last)
	}
	return nil
}

// Promote turns a replica into a master (REPLICAOF NO ONE). It stays a master
// across Restart.
func (r *Redis) Promote(ctx context.Context) error {
	if err := r.replicaOnly(); err != nil {
		return err
	}
	if _, err := r.do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		return err
	}
	r.mu.Lock()
	r.promoted = true
	r.mu.Unlock()
	return nil
}

// RedisCluster is a Redis Cluster of masters only (no replicas), slots spread
// evenly by redis-cli --cluster create.
type RedisCluster struct {
	Nodes []*Redis
}

// Addrs returns every node's address.
func (c *RedisCluster) Addrs() []string {
	return addrsOf(c.Nodes)
}

// Close closes every node.
func (c *RedisCluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// StartRedisCluster starts masters (at least 3) cluster-enabled nodes, creates
// the cluster with redis-cli and waits until every node reports cluster_state:ok
// and knows all slots and nodes.
func StartRedisCluster(ctx context.Context, masters int) (*RedisCluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("servers: a Redis cluster needs at least 3 masters, got %d", masters)
	}
	c := &RedisCluster{Nodes: make([]*Redis, masters)}
	err := parallel(masters, func(i int) error {
		r, err := startRedis(ctx, RedisOptions{}, true, "")
		c.Nodes[i] = r
		return err
	})
	if err != nil {
		closeAll(c.Nodes)
		return nil, err
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if err := redisCLI(ctx, c.Nodes[0], args); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitOK(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// WaitOK waits until every running node reports cluster_state:ok, 16384 slots
// ok and all nodes known.
func (c *RedisCluster) WaitOK(ctx context.Context) error {
	var bad string
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		for _, n := range c.Nodes {
			info, err := n.do(ctx, "CLUSTER", "INFO")
			if err != nil {
				bad = n.addr + ": " + err.Error()
				return false
			}
			if infoField(info, "cluster_state") != "ok" ||
				infoField(info, "cluster_slots_ok") != "16384" ||
				infoField(info, "cluster_known_nodes") != strconv.Itoa(len(c.Nodes)) {
				bad = n.addr + ":\n" + info
				return false
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("redis cluster not ok: %w; %s", err, bad)
	}
	return nil
}

// redisCLI runs redis-cli with args: the local one, or in a container of the image
// that node runs from.
func redisCLI(ctx context.Context, node *Redis, args []string) error {
	if node.p.inContainer() {
		_, err := runContainerOnce(ctx, "redis-cli", node.p.image, "", append([]string{"redis-cli"}, args...), node.dir)
		return err
	}
	cli, err := lookPath("redis-cli")
	if err != nil {
		return missing("redis-cli", "redis-tools")
	}
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args[:2], " "), err, out)
	}
	return nil
}
