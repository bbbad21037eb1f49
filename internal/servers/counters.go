package servers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// The servers' own request counters, for measurements that count what a store
// served (only differences between two readings mean anything). Each reads a server
// dlock started or one named by a DLOCK_*_ADDRS variable, without TLS.

// RedisCommands is the Redis server's total_commands_processed (INFO stats): every
// command it ran, those a script runs included.
func RedisCommands(ctx context.Context, addr string) (int64, error) {
	info, err := respDo(ctx, addr, "INFO", "stats")
	if err != nil {
		return 0, err
	}
	v := infoField(info, "total_commands_processed")
	if v == "" {
		return 0, fmt.Errorf("INFO stats of %s has no total_commands_processed", addr)
	}
	return strconv.ParseInt(v, 10, 64)
}

// ZooKeeperPackets is the packets the ZooKeeper server at addr received (mntr
// zk_packets_received). The server must allow mntr (4lw.commands.whitelist; the
// servers this package starts do).
func ZooKeeperPackets(ctx context.Context, addr string) (int64, error) {
	s, err := fourLetter(ctx, addr, nil, "mntr")
	if err != nil {
		return 0, err
	}
	return mntrField(s, "zk_packets_received")
}

// RedisScriptRuns is how many scripts the Redis server at addr ran since its
// statistics were last reset (CONFIG RESETSTAT): the calls of EVAL and EVALSHA in
// INFO commandstats.
func RedisScriptRuns(ctx context.Context, addr string) (int64, error) {
	info, err := respDo(ctx, addr, "INFO", "commandstats")
	if err != nil {
		return 0, err
	}
	var runs int64
	for _, cmd := range []string{"cmdstat_eval", "cmdstat_evalsha"} {
		for _, f := range strings.Split(infoField(info, cmd), ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats of %s: %s: %w", addr, cmd, err)
				}
				runs += n
			}
		}
	}
	return runs, nil
}
