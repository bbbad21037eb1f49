package servers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is one etcd member embedded in this process (go.etcd.io/etcd/server/v3/embed),
// or an external one from DLOCK_ETCD_ADDRS. Being in-process it cannot be
// paused (no SIGSTOP in-process): Stop closes it gracefully, Kill halts it
// abruptly (raft stops first, no leadership hand-over), Restart brings it back
// on the same ports.
type Etcd struct {
	name    string
	dir     string // temp root: data/, etcd.log
	client  string // host:port
	peer    string
	initial string // initial-cluster
	token   string
	ext     []string

	mu      sync.Mutex
	e       *embed.Etcd // nil while stopped
	started bool        // data dir holds a member already
	cluster *EtcdCluster

	closed closer
}

// Addr is host:port of the client URL.
func (e *Etcd) Addr() string { return e.client }

// Endpoints is the list to give clientv3: this member, or every address from
// DLOCK_ETCD_ADDRS.
func (e *Etcd) Endpoints() []string {
	if len(e.ext) > 0 {
		return append([]string(nil), e.ext...)
	}
	return []string{e.client}
}

// Name is the member name.
func (e *Etcd) Name() string { return e.name }

// External reports whether the server came from the environment.
func (e *Etcd) External() bool { return len(e.ext) > 0 }

// LogPath is the member's log file (level error; "" for external servers).
func (e *Etcd) LogPath() string {
	if e.External() {
		return ""
	}
	return filepath.Join(e.dir, "etcd.log")
}

// Embedded returns the running embedded server (nil when stopped or external).
func (e *Etcd) Embedded() *embed.Etcd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.e
}

// Running reports whether the member is up (true for external servers).
func (e *Etcd) Running() bool {
	return e.External() || e.Embedded() != nil
}

func externalEtcd(addrs []string) *Etcd { return &Etcd{client: addrs[0], ext: addrs} }

func newEtcd(name string, client, peer int, initial, token string) (*Etcd, error) {
	dir, err := tempDir("etcd")
	if err != nil {
		return nil, err
	}
	return &Etcd{
		name: name, dir: dir,
		client: hostPort(client), peer: hostPort(peer),
		initial: initial, token: token,
	}, nil
}

func (e *Etcd) config(state string) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = e.name
	cfg.Dir = filepath.Join(e.dir, "data")
	cu := url.URL{Scheme: "http", Host: e.client}
	pu := url.URL{Scheme: "http", Host: e.peer}
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = e.initial
	cfg.InitialClusterToken = e.token
	cfg.ClusterState = state
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(e.dir, "etcd.log")}
	cfg.SocketOpts.ReuseAddress = true
	return cfg
}

// launch starts the embedded server; it does not wait for readiness.
func (e *Etcd) launch() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		return fmt.Errorf("etcd %s: already running", e.name)
	}
	state := embed.ClusterStateFlagNew
	if e.started {
		state = embed.ClusterStateFlagExisting
	}
	srv, err := embed.StartEtcd(e.config(state))
	if err != nil {
		return fmt.Errorf("etcd %s: %w; log:\n%s", e.name, err, tailFile(e.LogPath(), 20))
	}
	e.e, e.started = srv, true
	return nil
}

// waitReady waits until the member has joined its cluster and serves.
func (e *Etcd) waitReady(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	srv := e.Embedded()
	if srv == nil {
		return fmt.Errorf("etcd %s: not running", e.name)
	}
	select {
	case <-srv.Server.ReadyNotify():
		return nil
	case err := <-srv.Err():
		return fmt.Errorf("etcd %s: %w; log:\n%s", e.name, err, tailFile(e.LogPath(), 20))
	case <-srv.Server.StopNotify():
		return fmt.Errorf("etcd %s stopped during start-up; log:\n%s", e.name, tailFile(e.LogPath(), 20))
	case <-ctx.Done():
		return fmt.Errorf("etcd %s not ready: %w; log:\n%s", e.name, ctx.Err(), tailFile(e.LogPath(), 20))
	}
}

// StartEtcd starts a single-member etcd in this process and waits until it
// serves.
func StartEtcd(ctx context.Context) (*Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	name := "etcd0"
	e, err := newEtcd(name, ports[0], ports[1], name+"=http://"+hostPort(ports[1]), "dlock-"+filepath.Base(os.TempDir()))
	if err != nil {
		return nil, err
	}
	if err := e.launch(); err != nil {
		os.RemoveAll(e.dir)
		return nil, err
	}
	if err := e.waitReady(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Stop closes the member gracefully (a leader hands leadership over first) and
// waits until it has stopped. No-op when stopped.
func (e *Etcd) Stop() error {
	if e.External() {
		return ErrExternal
	}
	e.mu.Lock()
	srv := e.e
	e.e = nil
	e.mu.Unlock()
	if srv == nil {
		return nil
	}
	srv.Close()
	<-srv.Server.StopNotify()
	return nil
}

// Kill stops the member abruptly, like a crash: its raft node halts at once
// (no leadership transfer, no goodbye to peers), then its listeners close.
// No-op when stopped.
func (e *Etcd) Kill() error {
	if e.External() {
		return ErrExternal
	}
	e.mu.Lock()
	srv := e.e
	e.e = nil
	e.mu.Unlock()
	if srv == nil {
		return nil
	}
	srv.Server.HardStop()
	srv.Close()
	<-srv.Server.StopNotify()
	return nil
}

// Restart stops the member if running and starts it again on the same ports.
// keepData=false wipes its data first; that is only possible for a single
// member (a cluster member would need to be removed and re-added).
func (e *Etcd) Restart(ctx context.Context, keepData bool) error {
	if e.External() {
		return ErrExternal
	}
	if !keepData && e.cluster != nil {
		return errors.New("servers: Restart(keepData=false) of an etcd cluster member is not supported")
	}
	if err := e.Stop(); err != nil {
		return err
	}
	if !keepData {
		if err := os.RemoveAll(filepath.Join(e.dir, "data")); err != nil {
			return err
		}
		e.mu.Lock()
		e.started = false
		e.mu.Unlock()
	}
	if err := e.launch(); err != nil {
		return err
	}
	return e.waitReady(ctx)
}

// Close stops the member and removes its temporary directory. Idempotent.
func (e *Etcd) Close() error {
	return e.closed.do(func() error {
		if e.External() {
			return nil
		}
		return joinErrs(e.Stop(), os.RemoveAll(e.dir))
	})
}

// IsLeader reports whether this running member believes it leads.
func (e *Etcd) IsLeader() bool {
	srv := e.Embedded()
	if srv == nil {
		return false
	}
	return srv.Server.Leader() == srv.Server.MemberID()
}

// EtcdCluster is an etcd cluster embedded in this process.
type EtcdCluster struct {
	Members []*Etcd
}

// StartEtcdCluster starts n members in this process and waits until all serve.
func StartEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: etcd cluster size %d", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := 0; i < n; i++ {
		initial = append(initial, fmt.Sprintf("etcd%d=http://%s", i+1, hostPort(ports[2*i+1])))
	}
	token := fmt.Sprintf("dlock-%d-%d", os.Getpid(), time.Now().UnixNano())
	c := &EtcdCluster{}
	for i := 0; i < n; i++ {
		m, err := newEtcd(fmt.Sprintf("etcd%d", i+1), ports[2*i], ports[2*i+1], strings.Join(initial, ","), token)
		if err != nil {
			c.Close()
			return nil, err
		}
		m.cluster = c
		c.Members = append(c.Members, m)
	}
	err = parallel(n, func(i int) error {
		if err := c.Members[i].launch(); err != nil {
			return err
		}
		return c.Members[i].waitReady(ctx)
	})
	if err == nil {
		_, err = c.Leader(ctx)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Endpoints returns every member's client address (running or not).
func (c *EtcdCluster) Endpoints() []string {
	a := make([]string, len(c.Members))
	for i, m := range c.Members {
		a[i] = m.Addr()
	}
	return a
}

// Leader waits until exactly one running member leads and every running
// member agrees, and returns it.
func (c *EtcdCluster) Leader(ctx context.Context) (*Etcd, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		var leader *Etcd
		agree, count := true, 0
		var lead uint64
		for _, m := range c.Members {
			srv := m.Embedded()
			if srv == nil {
				continue
			}
			l := uint64(srv.Server.Leader())
			if count == 0 {
				lead = l
			} else if l != lead {
				agree = false
			}
			count++
			if l != 0 && l == uint64(srv.Server.MemberID()) {
				leader = m
			}
		}
		if leader != nil && agree {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcd cluster: no agreed leader: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// KillLeader kills the current leader (Kill: no leadership hand-over, the
// others must notice and elect a new one) and returns it.
func (c *EtcdCluster) KillLeader(ctx context.Context) (*Etcd, error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return l, l.Kill()
}

// Close closes every member.
func (c *EtcdCluster) Close() error {
	errs := make([]error, len(c.Members))
	// Close in parallel: a member closing alone waits for its peers.
	_ = parallel(len(c.Members), func(i int) error { errs[i] = c.Members[i].Close(); return nil })
	return errors.Join(errs...)
}
