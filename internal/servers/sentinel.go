package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisSentinelGroup is a Redis master, replicas that replicate from it directly,
// and Sentinels (redis-server --sentinel) that monitor it under MasterName and fail
// it over: a master is down once it has not answered for 1s, and two sentinels must
// agree.
type RedisSentinelGroup struct {
	MasterName string
	Master     *Redis // the master the group started with
	Replicas   []*Redis
	Sentinels  []*Redis
}

// SentinelDownAfter is how long the sentinels of a RedisSentinelGroup wait for a
// silent master before they call it down.
const SentinelDownAfter = time.Second

// StartRedisSentinelGroup starts a master, replicas replicas of it and sentinels
// sentinels (at least 3, quorum 2), and waits until the replicas are in sync and
// every sentinel knows every replica and every other sentinel: from then on a
// failover can happen.
func StartRedisSentinelGroup(ctx context.Context, replicas, sentinels int) (*RedisSentinelGroup, error) {
	if sentinels < 3 || replicas < 1 {
		return nil, fmt.Errorf("servers: a sentinel group needs at least 3 sentinels and a replica, got %d and %d", sentinels, replicas)
	}
	g := &RedisSentinelGroup{MasterName: "dlock-master"}
	var err error
	if g.Master, err = StartRedis(ctx, RedisOptions{}); err != nil {
		return nil, err
	}
	g.Replicas = make([]*Redis, replicas)
	err = parallel(replicas, func(i int) error {
		r, err := startRedis(ctx, RedisOptions{}, false, g.Master.Addr())
		g.Replicas[i] = r
		return err
	})
	if err == nil {
		err = g.waitReplicasOnline(ctx, g.Master, replicas)
	}
	if err == nil {
		g.Sentinels = make([]*Redis, sentinels)
		err = parallel(sentinels, func(i int) error {
			s, err := startSentinel(ctx, g.MasterName, g.Master.Addr())
			g.Sentinels[i] = s
			return err
		})
	}
	if err == nil {
		err = g.waitSentinelsAgree(ctx, replicas)
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// SentinelAddrs returns the sentinels' addresses.
func (g *RedisSentinelGroup) SentinelAddrs() []string {
	return addrsOf(g.Sentinels)
}

// Servers returns the data nodes (master first, then replicas).
func (g *RedisSentinelGroup) Servers() []*Redis { return append([]*Redis{g.Master}, g.Replicas...) }

// MasterAddr returns the master every running sentinel names, once they agree.
func (g *RedisSentinelGroup) MasterAddr(ctx context.Context) (string, error) {
	return g.waitMaster(ctx, func(string) bool { return true })
}

// WaitFailover waits until every sentinel names a master other than old, that
// master says it is one (role:master), and every other live data node replicates
// from it with its link up; it returns the new master's address.
func (g *RedisSentinelGroup) WaitFailover(ctx context.Context, old string) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	addr, err := g.waitMaster(ctx, func(a string) bool { return a != old })
	if err != nil {
		return "", err
	}
	bad := ""
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		bad = ""
		for _, n := range g.Servers() {
			if !n.Running() {
				continue
			}
			info, err := n.do(ctx, "INFO", "replication")
			switch {
			case err != nil:
				bad = n.addr + ": " + err.Error()
			case n.addr == addr && infoField(info, "role") != "master":
				bad = n.addr + " is not yet a master"
			case n.addr != addr && (infoField(info, "master_port") != portOf(addr) || infoField(info, "master_link_status") != "up"):
				bad = n.addr + " does not yet replicate from " + addr
			}
			if bad != "" {
				return false
			}
		}
		return true
	}); err != nil {
		return "", fmt.Errorf("sentinel failover from %s to %s not complete: %s: %w", old, addr, bad, err)
	}
	return addr, nil
}

func portOf(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// waitMaster polls until every running sentinel names the same master and ok
// accepts it.
func (g *RedisSentinelGroup) waitMaster(ctx context.Context, ok func(addr string) bool) (string, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var last, agreed string
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		agreed = ""
		for i, s := range g.Sentinels {
			reply, err := s.do(ctx, "SENTINEL", "get-master-addr-by-name", g.MasterName)
			host, port, found := strings.Cut(reply, "\n")
			if err != nil || !found {
				last = fmt.Sprintf("sentinel %s: %q %v", s.addr, reply, err)
				return false
			}
			a := host + ":" + port
			if i > 0 && a != agreed {
				last = "sentinels disagree: " + agreed + " and " + a
				return false
			}
			agreed = a
		}
		last = "sentinels still name " + agreed
		return agreed != "" && ok(agreed)
	}); err != nil {
		return "", fmt.Errorf("sentinels: %s: %w", last, err)
	}
	return agreed, nil
}

// waitReplicasOnline waits until master reports n replicas online and each in sync.
func (g *RedisSentinelGroup) waitReplicasOnline(ctx context.Context, master *Redis, n int) error {
	var info string
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		var err error
		if info, err = master.do(ctx, "INFO", "replication"); err != nil || infoField(info, "connected_slaves") != strconv.Itoa(n) {
			return false
		}
		online := 0
		for i := range n {
			if strings.Contains(infoField(info, "slave"+strconv.Itoa(i)), "state=online") {
				online++
			}
		}
		return online == n
	}); err != nil {
		return fmt.Errorf("master %s: %d replicas not online: %w\n%s", master.addr, n, err, info)
	}
	return nil
}

// waitSentinelsAgree waits until every sentinel sees the master, its replicas and
// the other sentinels (they find each other through the master's hello channel).
func (g *RedisSentinelGroup) waitSentinelsAgree(ctx context.Context, replicas int) error {
	want := map[string]string{"num-slaves": strconv.Itoa(replicas), "num-other-sentinels": strconv.Itoa(len(g.Sentinels) - 1)}
	var last string
	if err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		for _, s := range g.Sentinels {
			reply, err := s.do(ctx, "SENTINEL", "master", g.MasterName)
			if err != nil {
				last = s.addr + ": " + err.Error()
				return false
			}
			fields := strings.Split(reply, "\n")
			got := map[string]string{}
			for i := 0; i+1 < len(fields); i += 2 {
				got[fields[i]] = fields[i+1]
			}
			for k, v := range want {
				if got[k] != v {
					last = fmt.Sprintf("sentinel %s: %s=%s, want %s", s.addr, k, got[k], v)
					return false
				}
			}
		}
		return true
	}); err != nil {
		return fmt.Errorf("sentinels never saw the whole group: %s: %w", last, err)
	}
	return nil
}

// Close closes every server of the group.
func (g *RedisSentinelGroup) Close() error {
	var errs []error
	for _, s := range g.Sentinels {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	for _, r := range g.Servers() {
		if r != nil {
			errs = append(errs, r.Close())
		}
	}
	return errors.Join(errs...)
}

// startSentinel starts a sentinel monitoring master under name (quorum 2).
func startSentinel(ctx context.Context, name, master string) (*Redis, error) {
	bin, image, err := command("redis-server", RedisImage, redisBinary)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("sentinel")
	if err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(master, ":")
	var s *Redis
	err = onFreePort(ctx, func(p int) (*proc, func(context.Context) error, error) {
		s = &Redis{Process: Process{dir: dir, grace: 15 * time.Second}, port: p, addr: hostPort(p)}
		s.wipe = func() error { return nil } // its state is its configuration file
		s.relaunch = func(ctx context.Context) error { return s.p.startReady(ctx, s.ready) }
		// The sentinel rewrites its configuration file as it learns: it must be its own.
		conf := filepath.Join(dir, "sentinel.conf")
		cfg := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s %s %s 2\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			p, dir, name, host, port, name, SentinelDownAfter.Milliseconds(), name, name)
		if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
			return nil, nil, err
		}
		s.p = &proc{name: "redis-sentinel " + s.addr, path: bin, args: []string{conf, "--sentinel"}, dir: dir,
			logPath: filepath.Join(dir, "sentinel.log"), image: image}
		return s.p, s.ready, nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}
