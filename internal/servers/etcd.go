package servers

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Etcd is one etcd member embedded in this process (go.etcd.io/etcd/server/v3/embed),
// or an external one from DLOCK_ETCD_ADDRS. Being in-process it cannot be
// paused (no SIGSTOP in-process) nor killed (an embedded member stopped abruptly
// while it serves can crash the whole process: EtcdCluster runs members in
// processes of their own for that): Stop closes it gracefully, Restart brings it
// back on the same ports.
type Etcd struct {
	name    string
	dir     string // temp root: data/, etcd.log
	client  string // host:port
	peer    string
	initial string // initial-cluster
	token   string
	ext     []string

	tls *PKI // clients must speak TLS and present a certificate

	mu      sync.Mutex
	e       *embed.Etcd  // nil while stopped
	started bool         // data dir holds a member already
	root    string       // root's password once EnableAuth ran
	ctr     *EtcdProcess // with DLOCK_SERVERS=docker: the member, in a container (e stays nil)

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
	if e.ctr != nil {
		return e.ctr.Running()
	}
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
	if e.tls != nil {
		cu.Scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: e.tls.ServerCert, KeyFile: e.tls.ServerKey,
			TrustedCAFile: e.tls.CAFile, ClientCertAuth: true}
	}
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
	// Every client that logs in (EnableAuth) has its password checked with bcrypt: at
	// the default cost that takes long enough under -race, with the member in the
	// test process, to starve the renewals of other clients' leases.
	cfg.BcryptCost = 4
	return cfg
}

// flags is config as the etcd command's flags (a member in a container), for a
// member whose data directory holds it already when existing.
func (e *Etcd) flags(existing bool) []string {
	state := embed.ClusterStateFlagNew
	if existing {
		state = embed.ClusterStateFlagExisting
	}
	cfg := e.config(state)
	args := []string{
		"--name=" + cfg.Name,
		"--data-dir=" + cfg.Dir,
		"--listen-client-urls=" + cfg.ListenClientUrls[0].String(),
		"--advertise-client-urls=" + cfg.AdvertiseClientUrls[0].String(),
		"--listen-peer-urls=" + cfg.ListenPeerUrls[0].String(),
		"--initial-advertise-peer-urls=" + cfg.AdvertisePeerUrls[0].String(),
		"--initial-cluster=" + cfg.InitialCluster,
		"--initial-cluster-token=" + cfg.InitialClusterToken,
		"--initial-cluster-state=" + cfg.ClusterState,
		"--log-level=" + cfg.LogLevel,
		"--log-outputs=" + strings.Join(cfg.LogOutputs, ","),
		"--socket-reuse-address=true",
		fmt.Sprintf("--bcrypt-cost=%d", cfg.BcryptCost),
	}
	if ti := cfg.ClientTLSInfo; !ti.Empty() {
		args = append(args, "--cert-file="+ti.CertFile, "--key-file="+ti.KeyFile,
			"--trusted-ca-file="+ti.TrustedCAFile, fmt.Sprintf("--client-cert-auth=%t", ti.ClientCertAuth))
	}
	return args
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
func StartEtcd(ctx context.Context) (*Etcd, error) { return StartEtcdWith(ctx, EtcdOptions{}) }

// EtcdOptions configures a member started by StartEtcdWith.
type EtcdOptions struct {
	// TLS makes the member serve its clients over TLS only, with the PKI's server
	// certificate, and require client certificates its CA signed.
	TLS *PKI
}

// StartEtcdWith starts a single-member etcd configured by o in this process and
// waits until it serves. With DLOCK_SERVERS=docker the member runs in a container
// of EtcdImage instead (the etcd command, the same configuration).
func StartEtcdWith(ctx context.Context, o EtcdOptions) (*Etcd, error) {
	if dockerOnly() {
		if err := dockerAvailable(); err != nil {
			return nil, fmt.Errorf("servers: %s=docker, but etcd cannot run in a container: %w", EnvServers, err)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	name := "etcd0"
	e, err := newEtcd(name, ports[0], ports[1], name+"=http://"+hostPort(ports[1]), "dlock-"+filepath.Base(os.TempDir()))
	if err != nil {
		return nil, err
	}
	e.tls = o.TLS
	if dockerOnly() {
		e.ctr = newEtcdProcess(e, "")
		e.ctr.p.mounts = o.TLS.mounts()
		if err := e.ctr.launch(ctx); err != nil {
			e.ctr.Kill()
			os.RemoveAll(e.dir)
			return nil, err
		}
		return e, nil
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

// Admin returns a client of the member as its administrator (the PKI's client
// certificate with TLS, root once EnableAuth ran), closed by the caller.
func (e *Etcd) Admin() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if e.tls != nil {
		cfg.TLS = e.tls.ClientTLS()
	}
	e.mu.Lock()
	if e.root != "" {
		cfg.Username, cfg.Password = "root", e.root
	}
	e.mu.Unlock()
	return clientv3.New(cfg)
}

// EnableAuth turns authentication on: it creates the user root with the password
// rootPassword and the root role, then enables auth. From then on every client
// must log in (Admin logs in as root).
func (e *Etcd) EnableAuth(ctx context.Context, rootPassword string) error {
	cli, err := e.Admin()
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.UserAdd(ctx, "root", rootPassword); err != nil {
		return fmt.Errorf("etcd %s: add root: %w", e.name, err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("etcd %s: grant root: %w", e.name, err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd %s: enable auth: %w", e.name, err)
	}
	e.mu.Lock()
	e.root = rootPassword
	e.mu.Unlock()
	return nil
}

// Stop closes the member gracefully (a leader hands leadership over first) and
// waits until it has stopped. No-op when stopped.
func (e *Etcd) Stop() error {
	if e.External() {
		return ErrExternal
	}
	if e.ctr != nil {
		return e.ctr.Stop()
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

// Restart stops the member if running and starts it again on the same ports.
// keepData=false wipes its data first; that is only possible for a single
// member (a cluster member would need to be removed and re-added).
func (e *Etcd) Restart(ctx context.Context, keepData bool) error {
	if e.External() {
		return ErrExternal
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
		if e.ctr != nil {
			e.ctr.started = false
		}
	}
	if e.ctr != nil {
		return e.ctr.launch(ctx)
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

// newEtcdMembers configures the n members of a new cluster on free ports (nothing
// is started).
func newEtcdMembers(n int) ([]*Etcd, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: etcd cluster size %d", n)
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("etcd%d=http://%s", i+1, hostPort(ports[2*i+1])))
	}
	token := fmt.Sprintf("dlock-%d-%d", os.Getpid(), time.Now().UnixNano())
	var ms []*Etcd
	for i := range n {
		m, err := newEtcd(fmt.Sprintf("etcd%d", i+1), ports[2*i], ports[2*i+1], strings.Join(initial, ","), token)
		if err != nil {
			for _, m := range ms {
				os.RemoveAll(m.dir)
			}
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}
