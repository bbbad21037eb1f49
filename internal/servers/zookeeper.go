package servers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ZooKeeper is one ZooKeeper server (Java, QuorumPeerMain), standalone or a
// member of a ZKEnsemble, or an external one from DLOCK_ZK_ADDRS. Servers run
// with tickTime=200ms, so sessions from 400ms to 60s are allowed. Pause makes the
// sessions connected to it time out; Restart(keepData false) removes its snapshots
// and logs (not myid).
type ZooKeeper struct {
	Process // temp root: zoo.cfg, data/, zookeeper.log
	addr    string
	id      int         // myid in an ensemble, 0 standalone
	ens     *ZKEnsemble // nil standalone
	ext     []string    // external: every address given
	tls     *PKI        // the client port speaks TLS only
}

// Addr is host:port of the client port.
func (z *ZooKeeper) Addr() string { return z.addr }

// Addrs is the list a client should be given: this server, or every address
// from DLOCK_ZK_ADDRS for an external one.
func (z *ZooKeeper) Addrs() []string {
	if len(z.ext) > 0 {
		return append([]string(nil), z.ext...)
	}
	return []string{z.addr}
}

// ID is the server's myid in an ensemble (0 when standalone).
func (z *ZooKeeper) ID() int { return z.id }

func externalZooKeeper(addrs []string) *ZooKeeper {
	return &ZooKeeper{addr: addrs[0], ext: addrs}
}

// zkJava finds java and a class path holding ZooKeeper's server and an slf4j
// binding: $ZOOKEEPER_CLASSPATH, Debian's /usr/share/java/zookeeper.jar (its
// manifest names the dependencies), or $ZOOKEEPER_HOME/lib of a release
// tarball.
func zkJava() (java, classpath string, err error) {
	java, err = lookPath("java")
	if err != nil {
		return "", "", missing("java", "default-jre-headless zookeeper")
	}
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return java, cp, nil
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err == nil {
		cp := []string{"/usr/share/java/zookeeper.jar"}
		for _, b := range []string{"slf4j-simple.jar", "slf4j-nop.jar"} {
			if _, err := os.Stat("/usr/share/java/" + b); err == nil {
				cp = append(cp, "/usr/share/java/"+b)
				break
			}
		}
		// The Netty connection factory (TLS) needs more of Netty than the manifest
		// names; Debian's zookeeper package installs it (libnetty-java).
		for _, b := range []string{"netty-codec.jar", "netty-resolver.jar", "netty-transport-native-unix-common.jar"} {
			if _, err := os.Stat("/usr/share/java/" + b); err == nil {
				cp = append(cp, "/usr/share/java/"+b)
			}
		}
		return java, strings.Join(cp, ":"), nil
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		jars, _ := filepath.Glob(filepath.Join(home, "lib", "*.jar"))
		top, _ := filepath.Glob(filepath.Join(home, "*.jar"))
		jars = append(jars, top...)
		if len(jars) > 0 {
			return java, strings.Join(append([]string{filepath.Join(home, "conf")}, jars...), ":"), nil
		}
	}
	return "", "", missing("ZooKeeper (/usr/share/java/zookeeper.jar)", "zookeeper")
}

type zkPorts struct{ client, peer, election int }

// ZooKeeperOptions configures a server started by StartZooKeeperWith.
type ZooKeeperOptions struct {
	// TLS makes the client port speak TLS only (Netty), with the PKI's server
	// certificate, and require client certificates its CA signed. FourLetter speaks
	// TLS to it too.
	TLS *PKI
	// MaxSessionTimeout is the longest session the server grants (its
	// maxSessionTimeout, in whole milliseconds): a client asking for more gets this
	// much. 0 means 60s.
	MaxSessionTimeout time.Duration
}

func newZooKeeper(id int, ports zkPorts, peers map[int]zkPorts, o ZooKeeperOptions) (*ZooKeeper, error) {
	var cp string
	java, image, err := command("java", ZooKeeperImage, func() (string, error) {
		java, c, err := zkJava()
		cp = c
		return java, err
	})
	if err != nil {
		return nil, err
	}
	if image != "" {
		cp = ZooKeeperClassPath.Name()
	}
	dir, err := tempDir("zookeeper")
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{Process: Process{dir: dir, grace: 15 * time.Second}, id: id, addr: hostPort(ports.client), tls: o.TLS}
	z.wipe = func() error { return removeContents(filepath.Join(z.dir, "data"), "myid") }
	z.relaunch = z.relaunchProcess
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "tickTime=200\ninitLimit=25\nsyncLimit=10\n")
	if t := o.TLS; t != nil {
		fmt.Fprintf(&cfg, "dataDir=%s\nsecureClientPort=%d\nsecureClientPortAddress=127.0.0.1\n", data, ports.client)
		fmt.Fprintf(&cfg, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
		fmt.Fprintf(&cfg, "ssl.keyStore.location=%s\nssl.keyStore.type=PEM\nssl.trustStore.location=%s\nssl.trustStore.type=PEM\nssl.clientAuth=need\n",
			t.ServerKeyStore, t.CAFile)
	} else {
		fmt.Fprintf(&cfg, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", data, ports.client)
	}
	maxSession := int64(60000)
	if o.MaxSessionTimeout > 0 {
		maxSession = o.MaxSessionTimeout.Milliseconds()
	}
	fmt.Fprintf(&cfg, "maxSessionTimeout=%d\nmaxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=*\n", maxSession)
	if id > 0 {
		for i := 1; i <= len(peers); i++ {
			pp := peers[i]
			fmt.Fprintf(&cfg, "server.%d=127.0.0.1:%d:%d\n", i, pp.peer, pp.election)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	cfgPath := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	z.p = &proc{
		name: "zookeeper " + z.addr,
		path: java,
		args: []string{
			"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.4lw.commands.whitelist=*",
			// Fast elections: peers that start late or restart are noticed
			// within a second instead of after up to a minute of back-off.
			"-Dzookeeper.fastleader.maxNotificationInterval=1000",
			"-Dzookeeper.cnxTimeout=1000",
			"-Dorg.slf4j.simpleLogger.showDateTime=true",
			"-cp", cp,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain", cfgPath,
		},
		dir:     dir,
		logPath: filepath.Join(dir, "zookeeper.log"),
		image:   image,
		mounts:  o.TLS.mounts(),
	}
	if o := os.Getenv("JAVA_TOOL_OPTIONS"); image != "" && o != "" {
		// A container gets no environment of this process's; JVM options set for the
		// server (e.g. zklock's tests: a fast container reaper) go along.
		z.p.env = []string{"JAVA_TOOL_OPTIONS=" + o}
	}
	return z, nil
}

// StartZooKeeper starts a standalone ZooKeeper and waits until it serves.
func StartZooKeeper(ctx context.Context) (*ZooKeeper, error) {
	return StartZooKeeperWith(ctx, ZooKeeperOptions{})
}

// StartZooKeeperWith starts a standalone ZooKeeper configured by o and waits until
// it serves.
func StartZooKeeperWith(ctx context.Context, o ZooKeeperOptions) (*ZooKeeper, error) {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		z, err := newZooKeeper(0, zkPorts{client: port}, nil, o)
		if err != nil {
			return nil, err
		}
		err = z.p.startReady(ctx, z.serving)
		if err == nil {
			return z, nil
		}
		inUse := z.p.addrInUse()
		os.RemoveAll(z.dir)
		if attempt < 3 && inUse {
			continue
		}
		return nil, err
	}
}

// FourLetter sends a four-letter-word command (srvr, stat, ruok, mntr, ...)
// and returns the answer.
func (z *ZooKeeper) FourLetter(ctx context.Context, cmd string) (string, error) {
	var tc *tls.Config
	if z.tls != nil {
		tc = z.tls.ClientTLS()
	}
	return fourLetter(ctx, z.addr, tc, cmd)
}

func fourLetter(ctx context.Context, addr string, tc *tls.Config, cmd string) (string, error) {
	var d net.Dialer
	var c net.Conn
	var err error
	if tc != nil {
		c, err = (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	_ = c.SetDeadline(dl)
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Mode returns the server's role from `srvr`: "standalone", "leader",
// "follower" or "observer"; an error when it is not serving (no quorum).
func (z *ZooKeeper) Mode(ctx context.Context) (string, error) {
	s, err := z.FourLetter(ctx, "srvr")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(s, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "Mode: "); ok {
			return m, nil
		}
	}
	return "", fmt.Errorf("zookeeper %s not serving: %q", z.addr, strings.TrimSpace(s))
}

func (z *ZooKeeper) serving(ctx context.Context) error {
	_, err := z.Mode(ctx)
	return err
}

func (z *ZooKeeper) alive(ctx context.Context) error {
	s, err := z.FourLetter(ctx, "ruok")
	if err != nil {
		return err
	}
	if s != "imok" {
		return fmt.Errorf("ruok: %q", s)
	}
	return nil
}

// relaunchProcess starts a stopped server again (Restart) and waits until it serves
// requests; an ensemble member without a running quorum of peers is only waited for
// until its process answers ruok (it cannot serve alone).
func (z *ZooKeeper) relaunchProcess(ctx context.Context) error {
	check := z.serving
	if z.ens != nil {
		running := 1
		for _, n := range z.ens.Nodes {
			if n != z && n.Running() {
				running++
			}
		}
		if running <= len(z.ens.Nodes)/2 {
			check = z.alive
		}
	}
	return z.p.startReady(ctx, check)
}

// ZKEnsemble is a ZooKeeper ensemble on loopback ports.
type ZKEnsemble struct {
	Nodes []*ZooKeeper
}

// StartZooKeeperEnsemble starts an n-member ensemble (n odd, usually 3) and
// waits until every member serves and one of them leads.
func StartZooKeeperEnsemble(ctx context.Context, n int) (*ZKEnsemble, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: ensemble size %d", n)
	}
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	peers := map[int]zkPorts{}
	for i := 1; i <= n; i++ {
		peers[i] = zkPorts{client: ports[3*(i-1)], peer: ports[3*(i-1)+1], election: ports[3*(i-1)+2]}
	}
	e := &ZKEnsemble{Nodes: make([]*ZooKeeper, n)}
	for i := 1; i <= n; i++ {
		z, err := newZooKeeper(i, peers[i], peers, ZooKeeperOptions{})
		if err != nil {
			e.Close()
			return nil, err
		}
		z.ens = e
		e.Nodes[i-1] = z
	}
	for _, z := range e.Nodes {
		if err := z.p.start(); err != nil {
			e.Close()
			return nil, err
		}
	}
	err = parallel(n, func(i int) error { return e.Nodes[i].p.waitReady(ctx, e.Nodes[i].serving) })
	if err == nil {
		_, err = e.Leader(ctx)
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Addrs returns every member's client address.
func (e *ZKEnsemble) Addrs() []string {
	return addrsOf(e.Nodes)
}

// Leader waits until exactly one running member reports Mode: leader and
// returns it.
func (e *ZKEnsemble) Leader(ctx context.Context) (*ZooKeeper, error) {
	var leaders []*ZooKeeper
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		leaders = nil
		for _, z := range e.Nodes {
			if !z.Running() {
				continue
			}
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			m, err := z.Mode(cctx)
			ccancel()
			if err == nil && m == "leader" {
				leaders = append(leaders, z)
			}
		}
		return len(leaders) == 1
	}); err != nil {
		return nil, fmt.Errorf("zookeeper ensemble: no single leader (%d): %w", len(leaders), err)
	}
	return leaders[0], nil
}

// KillLeader waits until the leader has every other running member as a synced
// follower (a member restarted a moment ago may still be catching up; killing the
// leader then is a different fault: two members down), kills it (SIGKILL) and
// returns it.
func (e *ZKEnsemble) KillLeader(ctx context.Context) (*ZooKeeper, error) {
	var l *ZooKeeper
	var running int
	var lerr error
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		if l, lerr = e.Leader(ctx); lerr != nil {
			return true
		}
		running = 0
		for _, z := range e.Nodes {
			if z.Running() {
				running++
			}
		}
		n, err := l.syncedFollowers(ctx)
		return err == nil && n == running-1
	}); err != nil {
		return nil, fmt.Errorf("zookeeper ensemble: the leader never had all %d followers synced: %w", running-1, err)
	}
	if lerr != nil {
		return nil, lerr
	}
	return l, l.Kill()
}

// syncedFollowers is the leader's count of followers in sync (4lw mntr).
func (z *ZooKeeper) syncedFollowers(ctx context.Context) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := z.FourLetter(cctx, "mntr")
	if err != nil {
		return 0, err
	}
	n, err := mntrField(s, "zk_synced_followers")
	return int(n), err
}

// mntrField is the integer value of name in a `mntr` answer.
func mntrField(mntr, name string) (int64, error) {
	for _, line := range strings.Split(mntr, "\n") {
		if v, ok := strings.CutPrefix(line, name+"\t"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("mntr: no %s in %q", name, mntr)
}

// Close closes every member.
func (e *ZKEnsemble) Close() error {
	var errs []error
	for _, z := range e.Nodes {
		if z != nil {
			errs = append(errs, z.Close())
		}
	}
	return errors.Join(errs...)
}
