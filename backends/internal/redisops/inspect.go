package redisops

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/spec"
)

// InspectOptions says what the Locker that will use a server needs of it.
type InspectOptions struct {
	// Node labels the findings when there are several servers ("" for one).
	Node string
	// Replication: look at the server's replicas (a single deployment; not a Redlock
	// master, whose replicas play no part in the algorithm).
	Replication bool
	// WaitReplicas is the Locker's wait_replicas (WithReplicaAck), 0 for none.
	WaitReplicas int
}

// Inspect reads one Redis server's own configuration (CONFIG GET, INFO
// replication) and says what it means for locks kept on it: persistence
// (ServerRestart), eviction (MutualExclusion, FencingMonotonic), replicas
// (Failover) and its wall clock (ClockJump). A setting c may not read (an ACL
// without +config|get or +info) is reported as exposed, with the server's answer.
func Inspect(ctx context.Context, c redis.Cmdable, o InspectOptions) []spec.Finding {
	var fs []spec.Finding
	add := func(f spec.Finding) {
		if o.Node != "" {
			f.Setting = o.Node + ": " + f.Setting
		}
		fs = append(fs, f)
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		add(spec.Finding{Scenario: spec.ServerRestart, Exposed: true, Setting: "CONFIG GET: " + err.Error(),
			Detail: "the server's configuration could not be read (grant +config|get to check it); persistence and eviction are unknown"})
	} else {
		add(persistence(cfg))
		fs = append(fs, labelled(o.Node, eviction(cfg))...)
	}
	if o.Replication {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			add(spec.Finding{Scenario: spec.Failover, Exposed: true, Setting: "INFO replication: " + err.Error(),
				Detail: "the server's replicas could not be listed (grant +info to check them)"})
		} else {
			add(replication(info, o.WaitReplicas))
		}
	}
	add(spec.Finding{Scenario: spec.ClockJump, Exposed: true, Setting: "keys expire by the server's wall clock",
		Detail: "a forward step of the server's clock (NTP, a VM restored) expires held locks early; keep the clock slewed, not stepped"})
	return fs
}

func labelled(node string, fs []spec.Finding) []spec.Finding {
	if node != "" {
		for i := range fs {
			fs[i].Setting = node + ": " + fs[i].Setting
		}
	}
	return fs
}

// persistence: what a restart or crash of the server keeps.
func persistence(cfg map[string]string) spec.Finding {
	f := spec.Finding{Scenario: spec.ServerRestart}
	aof, fsync, save := cfg["appendonly"], cfg["appendfsync"], cfg["save"]
	switch {
	case aof != "yes":
		f.Exposed = true
		f.Setting = fmt.Sprintf("appendonly=%s save=%q", aof, save)
		f.Detail = "no append-only file: a restart or crash loses every lock and fencing counter written since the last snapshot, so a held lock is granted again and tokens start over"
		if save == "" {
			f.Detail = "no persistence at all: a restart or crash empties the server, so every held lock is granted again and fencing tokens start over at 1"
		}
	case fsync == "always":
		f.Setting = "appendonly=yes appendfsync=always"
		f.Detail = "every grant is on disk before its reply: a restart keeps the locks"
	default:
		f.Exposed = true
		f.Setting = "appendonly=yes appendfsync=" + fsync
		f.Detail = "a crash (not a clean shutdown) loses the writes of up to the last second (appendfsync=everysec) or more (no): a lock granted just before is granted again; appendfsync=always closes this"
	}
	return f
}

// eviction: whether Redis may drop lock keys (they carry a TTL) or fencing counters
// (they do not) to make room.
func eviction(cfg map[string]string) []spec.Finding {
	policy, limit := cfg["maxmemory-policy"], cfg["maxmemory"]
	setting := fmt.Sprintf("maxmemory-policy=%s maxmemory=%s", policy, limit)
	if policy == "noeviction" {
		return []spec.Finding{{Property: spec.MutualExclusion, Setting: setting,
			Detail: "nothing is evicted: when memory is full, acquires fail instead"}}
	}
	limited := limit != "" && limit != "0"
	when := "once maxmemory is reached"
	if !limited {
		when = "as soon as a maxmemory limit is set (none is now)"
	}
	fs := []spec.Finding{{Property: spec.MutualExclusion, Exposed: limited, Setting: setting,
		Detail: "Redis may evict a held lock's key " + when + " and grant it again; set maxmemory-policy noeviction"}}
	if strings.HasPrefix(policy, "allkeys-") {
		fs = append(fs, spec.Finding{Property: spec.FencingMonotonic, Exposed: limited, Setting: setting,
			Detail: "fencing counters (keys without a TTL) may be evicted " + when + ": the key's tokens start over at 1"})
	}
	return fs
}

// replication: who could be promoted, and whether grants wait for them.
func replication(info string, waitReplicas int) spec.Finding {
	fields := map[string]string{}
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			fields[k] = v
		}
	}
	role := fields["role"]
	n, _ := strconv.Atoi(fields["connected_slaves"])
	f := spec.Finding{Scenario: spec.Failover, Setting: fmt.Sprintf("role:%s connected_slaves:%d wait_replicas=%d", role, n, waitReplicas)}
	switch {
	case role != "master":
		f.Exposed = true
		f.Detail = "the URL reaches a replica: it refuses writes, so every acquire fails; point it at the master (or use sentinel_master)"
	case n == 0:
		f.Detail = "no replicas: nothing can be promoted with stale locks (while the master is down, no lock can be taken)"
	case waitReplicas == 0:
		f.Exposed = true
		f.Detail = fmt.Sprintf("%d replica(s) copy grants asynchronously and the URL sets no wait_replicas: a replica promoted after the master dies may never have seen a held lock and grants it again, and may hand out a fencing token again (FailoverFencing)", n)
	case waitReplicas > n:
		f.Exposed = true
		f.Detail = fmt.Sprintf("wait_replicas=%d but only %d replica(s) are connected: every acquire fails (ErrUnavailable) until more are", waitReplicas, n)
	default:
		f.Detail = fmt.Sprintf("every grant waits until %d of %d replica(s) acknowledged it: a promoted replica that did has the lock (replication stays asynchronous: one that did not may still be promoted)", waitReplicas, n)
	}
	return f
}
