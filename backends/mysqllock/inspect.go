package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock/spec"
)

// serverState is what the deployment check reads from a server.
type serverState struct {
	waitTimeout    int64  // the session's wait_timeout (the URL's, for GET_LOCK)
	logBin         bool   // binary log on: replicas can copy this server
	readOnly       bool   // read_only: writes refused (a replica, usually)
	flushAtCommit  string // innodb_flush_log_at_trx_commit
	replicaOf      string // the master it replicates from ("" for none)
	replicaUnknown error  // SHOW REPLICA STATUS refused (privilege)
}

// readState reads s's variables and replication status on one connection of cfg.
func readState(ctx context.Context, cfg *mysql.Config) (serverState, error) {
	var s serverState
	db, err := connect(ctx, cfg)
	if err != nil {
		return s, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return s, fmt.Errorf("mysqllock: %w", err)
	}
	defer conn.Close()
	err = conn.QueryRowContext(ctx, "SELECT @@session.wait_timeout, @@global.log_bin, @@global.read_only, @@global.innodb_flush_log_at_trx_commit").
		Scan(&s.waitTimeout, &s.logBin, &s.readOnly, &s.flushAtCommit)
	if err != nil {
		return s, fmt.Errorf("mysqllock: read server variables: %w", err)
	}
	s.replicaOf, s.replicaUnknown = replicaSource(ctx, conn)
	return s, nil
}

// replicaSource returns "host:port" of the master conn's server replicates from,
// "" when it replicates from none, or the server's refusal (SHOW REPLICA STATUS
// needs the REPLICATION CLIENT privilege, SLAVE MONITOR on MariaDB).
func replicaSource(ctx context.Context, conn *sql.Conn) (string, error) {
	rows, err := conn.QueryContext(ctx, "SHOW REPLICA STATUS")
	if err != nil {
		// Before MySQL 8.0.22 and MariaDB 10.5 only the old name exists.
		rows, err = conn.QueryContext(ctx, "SHOW SLAVE STATUS")
	}
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		return "", err
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", err
	}
	var host, port string
	for i, c := range cols {
		switch c {
		case "Source_Host", "Master_Host":
			host = vals[i].String
		case "Source_Port", "Master_Port":
			port = vals[i].String
		}
	}
	return host + ":" + port, nil
}

// replicationFinding: what a failover does to the locks kept on this server, given
// its replication role. lost says what a promoted replica lacks.
func (s serverState) replicationFinding(lost string) spec.Finding {
	f := spec.Finding{Scenario: spec.Failover, Setting: fmt.Sprintf("log_bin=%s read_only=%s", onOff(s.logBin), onOff(s.readOnly))}
	if s.replicaOf != "" {
		f.Setting += " replicating from " + s.replicaOf
	} else if s.replicaUnknown != nil {
		f.Setting += " replica status unreadable (" + firstLine(s.replicaUnknown.Error()) + ")"
	}
	switch {
	case s.replicaOf != "" || s.readOnly:
		f.Exposed = true
		f.Detail = "the URL reaches a replica (or a read-only server): it refuses the locks' writes; point it at the master"
	case s.logBin:
		f.Exposed = true
		f.Detail = "the binary log is on, so replicas may copy this server asynchronously: " + lost
	default:
		f.Detail = "no binary log: no replica copies this server, so none can be promoted in its place"
	}
	return f
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// inspectTable: the table lock lives in InnoDB rows and expires by the server's
// clock: durability of a commit (ServerRestart), replication (Failover) and the
// server's wall clock (ClockJump) matter.
func inspectTable(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	cfg, _, _, err := parseTable(u)
	if err != nil {
		return nil, err
	}
	s, err := readState(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r := spec.Finding{Scenario: spec.ServerRestart, Setting: "innodb_flush_log_at_trx_commit=" + s.flushAtCommit}
	switch s.flushAtCommit {
	case "1":
		r.Detail = "every committed grant is on disk before its reply: a restart or crash keeps the locks and their tokens"
	case "2":
		r.Exposed = true
		r.Detail = "a grant reaches the operating system at commit and the disk about once a second: a crash of the server keeps it, a crash of the machine may lose the last second of grants (a lock granted again, a token repeated)"
	default:
		r.Exposed = true
		r.Detail = "commits reach the disk about once a second: a crash may lose the last second of grants (a lock granted again, a token repeated)"
	}
	return []spec.Finding{r,
		s.replicationFinding("a replica promoted after this server dies may lack the latest grants, and grant a held lock again or repeat a token"),
		{Scenario: spec.ClockJump, Exposed: true, Setting: "expiry by the server's UTC_TIMESTAMP",
			Detail: "a forward step of the database server's clock expires held locks early"}}, nil
}

// getLockLongWait is the wait_timeout above which the deployment check calls the
// time a vanished client keeps its GET_LOCK locks a risk.
const getLockLongWait = 5 * time.Minute

// inspectGetLock: GET_LOCK locks live as long as their connection, in the server's
// memory only: wait_timeout (HolderCrash) and replication (Failover) matter.
func inspectGetLock(ctx context.Context, u *url.URL) ([]spec.Finding, error) {
	cfg, _, _, err := parseGetLock(u)
	if err != nil {
		return nil, err
	}
	s, err := readState(ctx, cfg)
	if err != nil {
		return nil, err
	}
	wait := time.Duration(s.waitTimeout) * time.Second
	c := spec.Finding{Scenario: spec.HolderCrash, Setting: fmt.Sprintf("wait_timeout=%d", s.waitTimeout),
		Exposed: wait > getLockLongWait,
		Detail:  fmt.Sprintf("a client that vanishes without closing its connection (a crashed host, a partition) keeps its locks for %v", wait)}
	if c.Exposed {
		c.Detail += "; set wait_timeout in the URL to shorten it"
	}
	return []spec.Finding{c,
		s.replicationFinding("GET_LOCK locks are not replicated at all, so a replica promoted in its place holds none of them")}, nil
}
