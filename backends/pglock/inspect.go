package pglock

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/spec"
)

// serverState is what the deployment check reads from a server.
type serverState struct {
	pooler          poolerInfo
	fsync           string // fsync
	syncCommit      string // synchronous_commit
	syncStandbys    string // synchronous_standby_names
	inRecovery      bool   // a standby (read-only)
	replicas        int    // standbys streaming from it (pg_stat_replication)
	replicasUnknown error  // pg_stat_replication unreadable
	idleTimeout     string // idle_session_timeout, as the session sees it
}

// readState reads cfg's server.
func readState(ctx context.Context, cfg *pgxpool.Config) (serverState, error) {
	var s serverState
	var err error
	if s.pooler, err = findPooler(ctx, cfg.ConnConfig); err != nil {
		return s, fmt.Errorf("pglock: connect to %s: %w", hostOf(cfg), err)
	}
	cc := cfg.ConnConfig.Copy()
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	c, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return s, fmt.Errorf("pglock: connect to %s: %w", hostOf(cfg), err)
	}
	defer closeQuietly(c)
	err = c.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'),
  current_setting('synchronous_standby_names'), pg_is_in_recovery(), current_setting('idle_session_timeout')`).
		Scan(&s.fsync, &s.syncCommit, &s.syncStandbys, &s.inRecovery, &s.idleTimeout)
	if err != nil {
		return s, fmt.Errorf("pglock: read server settings: %w", err)
	}
	// pg_stat_replication shows every standby to a superuser or pg_read_all_stats;
	// to others their rows' details are hidden, not the rows.
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication").Scan(&s.replicas); err != nil {
		s.replicasUnknown = err
	}
	return s, nil
}

// replicationFinding: what a failover does to locks kept on this server.
func (s serverState) replicationFinding(lost string, table bool) spec.Finding {
	f := spec.Finding{Scenario: spec.Failover, Setting: fmt.Sprintf("pg_is_in_recovery=%v streaming replicas=%d synchronous_standby_names=%q synchronous_commit=%s",
		s.inRecovery, s.replicas, s.syncStandbys, s.syncCommit)}
	if s.replicasUnknown != nil {
		f.Setting += " (replicas unreadable: " + firstLine(s.replicasUnknown.Error()) + ")"
	}
	synced := s.syncStandbys != "" && (s.syncCommit == "on" || s.syncCommit == "remote_apply" || s.syncCommit == "remote_write")
	switch {
	case s.inRecovery:
		f.Exposed = true
		f.Detail = "the URL reaches a standby: it refuses the locks' writes; point it at the primary"
	case s.replicas == 0 && s.replicasUnknown == nil:
		f.Detail = "no standby streams from this server, so none can be promoted in its place"
	case table && synced:
		f.Detail = "commits wait for a synchronous standby (synchronous_standby_names, synchronous_commit): a promoted standby has every acknowledged grant"
	default:
		f.Exposed = true
		f.Detail = lost
	}
	return f
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// poolerFinding names what stands between the client and the server.
func (s serverState) poolerFinding(advisory bool) spec.Finding {
	f := spec.Finding{Property: spec.MutualExclusion, Setting: s.pooler.what()}
	switch {
	case !s.pooler.present:
		f.Detail = "the client talks to PostgreSQL itself"
	case s.pooler.pinned():
		f.Detail = "a pooler that keeps each client on one server session: session locks hold"
	case advisory:
		f.Exposed = true
		f.Detail = "session advisory locks stay with a server session the pooler hands to other clients: exclusion silently ends (postgres+advisory:// refuses to open; connect it to PostgreSQL itself, or use postgres://)"
	default:
		f.Detail = "the lease table works through it (each statement stands alone); waiters poll, since LISTEN cannot pass it"
	}
	return f
}

// inspectTable: the lease table lives in rows and expires by the server's clock:
// durability of a commit (ServerRestart), replication (Failover), the server's
// wall clock (ClockJump), and what stands in front of it.
func inspectTable(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	p, err := parseURL(u, false)
	if err != nil {
		return nil, err
	}
	s, err := readState(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	r := spec.Finding{Scenario: spec.ServerRestart, Setting: fmt.Sprintf("fsync=%s synchronous_commit=%s", s.fsync, s.syncCommit)}
	switch {
	case s.fsync != "on":
		r.Exposed = true
		r.Detail = "commits are not flushed to disk: a crash of the machine (not of the server alone) may lose grants (a lock granted again, a token repeated)"
	case s.syncCommit == "off":
		r.Exposed = true
		r.Detail = "a commit is acknowledged before it is on disk: a crash may lose the last grants (a lock granted again, a token repeated)"
	default:
		r.Detail = "every acknowledged grant is on disk: a restart or crash keeps the locks and their tokens"
	}
	return []spec.Finding{s.poolerFinding(false), r,
		s.replicationFinding("standbys replicate asynchronously: a standby promoted after this server dies may lack the latest grants, and grant a held lock again or repeat a token", true),
		{Scenario: spec.ClockJump, Exposed: true, Setting: "expiry by the server's statement_timestamp()",
			Detail: "a forward step of the database server's clock expires held locks early"}}, nil
}

// inspectAdvisory: advisory locks live in the server's memory, as long as their
// session: what stands in front of the server (a pooler breaks them),
// idle_session_timeout (HolderCrash) and replication (Failover: not replicated).
func inspectAdvisory(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	p, err := parseURL(u, true)
	if err != nil {
		return nil, err
	}
	s, err := readState(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	c := spec.Finding{Scenario: spec.HolderCrash, Setting: "idle_session_timeout=" + s.idleTimeout}
	if s.idleTimeout == "0" {
		c.Exposed = true
		c.Detail = "a client that vanishes without closing its connection (a crashed host, a partition) keeps its locks until TCP keepalives give up (hours); set session_timeout in the URL"
	} else {
		c.Detail = "a client that vanishes without closing its connection keeps its locks for " + s.idleTimeout
	}
	return []spec.Finding{s.poolerFinding(true), c,
		s.replicationFinding("advisory locks are not replicated at all, so a standby promoted in its place holds none of them", false)}, nil
}
