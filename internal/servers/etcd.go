package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is one etcd member running as a process of its own — the etcd member binary
// (etcdbin.go: lab/cmd/dlock-etcd, built once and cached), or with
// DLOCK_SERVERS=docker the etcd command in a container of EtcdImage, on the same
// command line — or an external one from DLOCK_ETCD_ADDRS. As every other server,
// it can be stopped (SIGTERM: a leader hands leadership over first), killed
// (SIGKILL: it dies mid-request, as a crashed server does), paused (SIGSTOP) and
// restarted on its data. Restart(keepData false) is only possible for a single
// member (a cluster member would need to be removed and re-added).
type Etcd struct {
	Process // temp root: data/, etcd.log
	name    string
	client  string // host:port
	peer    string
	initial string // initial-cluster
	token   string
	member  bool // one of an EtcdCluster's members
	ext     []string

	tls *PKI // clients must speak TLS and present a certificate

	mu      sync.Mutex
	started bool   // the data directory holds the member already
	root    string // root's password once EnableAuth ran
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

func externalEtcd(addrs []string) *Etcd { return &Etcd{client: addrs[0], ext: addrs} }

// newEtcd configures a member on the given ports (nothing is started).
func newEtcd(name string, client, peer int, initial, token string, tls *PKI) (*Etcd, error) {
	bin, image, err := command("etcd", EtcdImage, etcdBinary)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("etcd")
	if err != nil {
		return nil, err
	}
	e := &Etcd{
		Process: Process{dir: dir, grace: 30 * time.Second},
		name:    name, client: hostPort(client), peer: hostPort(peer),
		initial: initial, token: token, tls: tls,
	}
	e.p = &proc{name: "etcd " + name, path: bin, dir: dir, logPath: filepath.Join(dir, "etcd.log"),
		image: image, mounts: tls.mounts()}
	e.wipe = e.wipeData
	e.relaunch = e.launch
	return e, nil
}

// wipeData removes the member's data: it starts as a new member next time.
func (e *Etcd) wipeData() error {
	if e.member {
		return errors.New("servers: Restart(keepData=false) of an etcd cluster member is not supported")
	}
	if err := os.RemoveAll(filepath.Join(e.dir, "data")); err != nil {
		return err
	}
	e.mu.Lock()
	e.started = false
	e.mu.Unlock()
	return nil
}

// flags is the member's configuration as the etcd command's flags (which the etcd
// member binary takes too), for a member whose data directory holds it already when
// existing.
func (e *Etcd) flags(existing bool) []string {
	state := "new"
	if existing {
		state = "existing"
	}
	scheme := "http"
	if e.tls != nil {
		scheme = "https"
	}
	args := []string{
		"--name=" + e.name,
		"--data-dir=" + filepath.Join(e.dir, "data"),
		"--listen-client-urls=" + scheme + "://" + e.client,
		"--advertise-client-urls=" + scheme + "://" + e.client,
		"--listen-peer-urls=http://" + e.peer,
		"--initial-advertise-peer-urls=http://" + e.peer,
		"--initial-cluster=" + e.initial,
		"--initial-cluster-token=" + e.token,
		"--initial-cluster-state=" + state,
		"--log-level=error",
		"--log-outputs=stderr",
		"--socket-reuse-address=true",
		// Every client that logs in (EnableAuth) has its password checked with bcrypt:
		// at the default cost that takes long enough under load to starve the renewals
		// of other clients' leases.
		"--bcrypt-cost=4",
	}
	if t := e.tls; t != nil {
		args = append(args, "--cert-file="+t.ServerCert, "--key-file="+t.ServerKey,
			"--trusted-ca-file="+t.CAFile, "--client-cert-auth=true")
	}
	return args
}

// launch starts the member's process and waits until it answers on its client URL.
func (e *Etcd) launch(ctx context.Context) error {
	e.mu.Lock()
	e.p.args = e.flags(e.started)
	e.mu.Unlock()
	if err := e.p.start(); err != nil {
		return err
	}
	e.mu.Lock()
	e.started = true
	e.mu.Unlock()
	return e.waitServing(ctx)
}

// waitServing polls the member's status until it answers, its process exits or ctx
// ends. A member serves its clients only once it is ready (it has joined its
// cluster).
func (e *Etcd) waitServing(ctx context.Context) error {
	cli, err := e.Admin()
	if err != nil {
		return err
	}
	defer cli.Close()
	return e.p.waitReady(ctx, func(ctx context.Context) error {
		_, err := cli.Status(ctx, e.client)
		return err
	})
}

// StartEtcd starts a single-member etcd and waits until it serves.
func StartEtcd(ctx context.Context) (*Etcd, error) { return StartEtcdWith(ctx, EtcdOptions{}) }

// EtcdOptions configures a member started by StartEtcdWith.
type EtcdOptions struct {
	// TLS makes the member serve its clients over TLS only, with the PKI's server
	// certificate, and require client certificates its CA signed.
	TLS *PKI
}

// StartEtcdWith starts a single-member etcd configured by o and waits until it
// serves.
func StartEtcdWith(ctx context.Context, o EtcdOptions) (*Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	name := "etcd0"
	e, err := newEtcd(name, ports[0], ports[1], name+"=http://"+hostPort(ports[1]), "dlock-"+filepath.Base(os.TempDir()), o.TLS)
	if err != nil {
		return nil, err
	}
	if err := e.launch(ctx); err != nil {
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

// EtcdCluster is an etcd cluster of member processes.
type EtcdCluster struct {
	Members []*Etcd
}

// StartEtcdCluster starts n members and waits until they agree on a leader.
func StartEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
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
	c := &EtcdCluster{}
	for i := range n {
		m, err := newEtcd(fmt.Sprintf("etcd%d", i+1), ports[2*i], ports[2*i+1], strings.Join(initial, ","), token, nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		m.member = true
		c.Members = append(c.Members, m)
	}
	err = parallel(n, func(i int) error { return c.Members[i].launch(ctx) })
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
	return addrsOf(c.Members)
}

// Leader waits until every running member names the same leader, one of them, and
// returns it.
func (c *EtcdCluster) Leader(ctx context.Context) (*Etcd, error) {
	cli, err := etcdAdmin(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var leader *Etcd
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		leader = c.agreedLeader(ctx, cli)
		return leader != nil
	}); err != nil {
		return nil, fmt.Errorf("etcd cluster: no agreed leader: %w", err)
	}
	return leader, nil
}

// agreedLeader is the member every running member names as the leader, or nil.
func (c *EtcdCluster) agreedLeader(ctx context.Context, cli *clientv3.Client) *Etcd {
	var leader *Etcd
	var lead uint64
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.Addr())
		scancel()
		if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return nil
		}
		lead = st.Leader
		if st.Header.MemberId == st.Leader {
			leader = m
		}
	}
	return leader
}

// KillLeader kills the current leader's process (SIGKILL) and returns it.
func (c *EtcdCluster) KillLeader(ctx context.Context) (*Etcd, error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return l, l.Kill()
}

// Close kills every member and removes their directories.
func (c *EtcdCluster) Close() error {
	errs := make([]error, len(c.Members))
	for i, m := range c.Members {
		errs[i] = m.Close()
	}
	return errors.Join(errs...)
}

// etcdAdmin is a quiet client for status checks.
func etcdAdmin(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}
