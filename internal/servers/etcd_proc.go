package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdMemberEnv carries an etcdMemberSpec to a process that EtcdMemberMain turns into
// one etcd member.
const etcdMemberEnv = "DLOCK_ETCD_MEMBER"

type etcdMemberSpec struct {
	Name, Dir, Client, Peer, Initial, Token string
	Existing                                bool // the data directory holds the member already
}

// EtcdMemberMain makes this process one member of an EtcdCluster when the
// cluster started it as one: it serves until SIGTERM (or until the parent dies) and
// exits. Otherwise it returns at once. A test binary that starts an EtcdCluster
// calls it first thing in TestMain.
func EtcdMemberMain() {
	raw := os.Getenv(etcdMemberEnv)
	if raw == "" {
		return
	}
	var s etcdMemberSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintf(os.Stderr, "etcd member: %s: %v\n", etcdMemberEnv, err)
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	e := &Etcd{name: s.Name, dir: s.Dir, client: s.Client, peer: s.Peer, initial: s.Initial, token: s.Token, started: s.Existing}
	if err := e.launch(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := e.waitReady(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	<-term
	if err := e.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// EtcdProcess is one etcd member running in a process of its own (this binary,
// started again; see EtcdMemberMain), so that Kill is a real SIGKILL: the member
// dies mid-request, as a crashed server does. An embedded member cannot be killed
// that way, and stopping one abruptly while it serves requests can crash the
// whole process (a read on its closed storage).
type EtcdProcess struct {
	m       *Etcd // its configuration; never launched in this process
	p       *proc
	started bool
}

// Addr is host:port of the member's client URL.
func (e *EtcdProcess) Addr() string { return e.m.client }

// Name is the member name.
func (e *EtcdProcess) Name() string { return e.m.name }

// launch starts the member's process and waits until it answers on its client URL.
func (e *EtcdProcess) launch(ctx context.Context) error {
	spec, err := json.Marshal(etcdMemberSpec{Name: e.m.name, Dir: e.m.dir, Client: e.m.client, Peer: e.m.peer,
		Initial: e.m.initial, Token: e.m.token, Existing: e.started})
	if err != nil {
		return err
	}
	if e.p.inContainer() {
		e.p.args = e.m.flags(e.started)
	} else {
		e.p.env = []string{etcdMemberEnv + "=" + string(spec)}
	}
	if err := e.p.start(); err != nil {
		return err
	}
	e.started = true
	return e.waitServing(ctx)
}

// waitServing polls the member's status until it answers, its process exits or ctx
// ends.
func (e *EtcdProcess) waitServing(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	cli, err := e.m.Admin()
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(sctx, e.m.client)
		scancel()
		if err == nil {
			return nil
		}
		select {
		case <-e.p.exited():
			return fmt.Errorf("etcd %s exited during start-up; log:\n%s\n%s", e.m.name, tailFile(e.p.logPath, 20), tailFile(e.m.LogPath(), 20))
		case <-ctx.Done():
			return fmt.Errorf("etcd %s not serving: %w (%v); log:\n%s", e.m.name, ctx.Err(), err, tailFile(e.m.LogPath(), 20))
		case <-time.After(pollInterval):
		}
	}
}

// newEtcdProcess is member m as a process of this binary (re-executed as
// EtcdMemberMain) or, with DLOCK_SERVERS=docker, as a container of EtcdImage.
func newEtcdProcess(m *Etcd, self string) *EtcdProcess {
	p := &proc{name: "etcd member " + m.name, path: self, args: []string{"-test.run=^$"}, dir: m.dir,
		logPath: filepath.Join(m.dir, "process.log")}
	if dockerOnly() {
		p.name, p.path, p.image = "etcd "+m.name, "etcd", EtcdImage.Name()
	}
	return &EtcdProcess{m: m, p: p}
}

// Kill sends the member's process SIGKILL and waits for it to die. No-op when it
// is not running.
func (e *EtcdProcess) Kill() error { return e.p.kill() }

// Stop ends the member gracefully (SIGTERM). No-op when it is not running.
func (e *EtcdProcess) Stop() error { return e.p.stop(30 * time.Second) }

// Restart stops the member if it runs and starts it again on its data (keepData
// false is not supported: a cluster member would need to be removed and re-added).
func (e *EtcdProcess) Restart(ctx context.Context, keepData bool) error {
	if !keepData {
		return errors.New("servers: Restart(keepData=false) of an etcd cluster member is not supported")
	}
	if err := e.Stop(); err != nil {
		return err
	}
	return e.launch(ctx)
}

// Running reports whether the member's process is alive.
func (e *EtcdProcess) Running() bool {
	_, _, alive := e.p.state()
	return alive
}

// Endpoints is the list to give clientv3 for this member alone.
func (e *EtcdProcess) Endpoints() []string { return []string{e.m.client} }

// EtcdCluster is an etcd cluster whose members each run in a process of their own
// (EtcdProcess).
type EtcdCluster struct {
	Members []*EtcdProcess
}

// StartEtcdCluster starts n members, each in a process running this binary (which
// must call EtcdMemberMain first thing), and waits until they agree on a leader.
//
// With DLOCK_SERVERS=docker each member is a container of EtcdImage instead,
// running the etcd command with the same configuration.
func StartEtcdCluster(ctx context.Context, n int) (*EtcdCluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if dockerOnly() {
		if err := dockerAvailable(); err != nil {
			return nil, fmt.Errorf("servers: %s=docker, but etcd cannot run in a container: %w", EnvServers, err)
		}
	}
	members, err := newEtcdMembers(n)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{}
	for _, m := range members {
		c.Members = append(c.Members, newEtcdProcess(m, self))
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
	a := make([]string, len(c.Members))
	for i, m := range c.Members {
		a[i] = m.Addr()
	}
	return a
}

// Leader waits until every running member names the same leader, one of them, and
// returns it.
func (c *EtcdCluster) Leader(ctx context.Context) (*EtcdProcess, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	cli, err := etcdAdmin(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	for {
		var leader *EtcdProcess
		var lead uint64
		agree := true
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, m.Addr())
			scancel()
			if err != nil || st.Leader == 0 || (lead != 0 && st.Leader != lead) {
				agree = false
				break
			}
			lead = st.Leader
			if st.Header.MemberId == st.Leader {
				leader = m
			}
		}
		if agree && leader != nil {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcd cluster: no agreed leader: %w", ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// KillLeader kills the current leader's process (SIGKILL) and returns it.
func (c *EtcdCluster) KillLeader(ctx context.Context) (*EtcdProcess, error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	return l, l.Kill()
}

// Close stops every member and removes their directories.
func (c *EtcdCluster) Close() error {
	errs := make([]error, len(c.Members))
	// In parallel: a member stopping alone waits for its peers.
	_ = parallel(len(c.Members), func(i int) error {
		errs[i] = errors.Join(c.Members[i].Stop(), os.RemoveAll(c.Members[i].m.dir))
		return nil
	})
	return errors.Join(errs...)
}

// etcdAdmin is a quiet client for status checks.
func etcdAdmin(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}
