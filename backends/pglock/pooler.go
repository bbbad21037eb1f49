package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The pooler trap. A session advisory lock belongs to the server session that
// took it. A connection pooler in transaction (or statement) mode — PgBouncer's
// pool_mode=transaction, the usual setting — hands a client's next transaction to
// whichever server session is free: the lock stays with a session that the pooler
// then gives to other clients (who are granted it again at once: advisory locks are
// re-entrant), and the client's unlock runs on a session that does not hold it.
// Exclusion silently ends.
//
// How a pooler shows itself, reliably:
//
//  1. Present: PostgreSQL names the server session in the cancel key it sends at
//     start-up (BackendKeyData), the same process id that pg_backend_pid()
//     returns. A pooler answers the start-up itself, with a cancel key of its own
//     (cancel requests go to it, and it forwards them): the two differ. A direct
//     connection to PostgreSQL always has them equal.
//  2. Pinned or not: a pooler in session mode keeps one server session for a
//     client from its first statement to its last; in transaction mode a client
//     holds one only during a transaction. So: client A reads its session
//     (pg_backend_pid()); client B opens a transaction and reads its session (with
//     the pooler's LIFO reuse, it is A's, which A let go); A reads its session
//     again. In session mode A's session is the same; in transaction mode it
//     differs, or A must wait until B's transaction ends (the pool has no other:
//     the second read times out); and B's transaction may itself get A's session.
//     A pooler that has not yet put A's session back when B begins gives B another
//     and A its own again: a miss, so the probe runs poolerProbes times; one move
//     is enough.
//
// A transaction pooler whose reuse of server sessions happened to spare the probe
// every time would be taken for pinned: poolerProbes makes that unlikely, not
// impossible, on a busy machine or a pooler shared with other busy clients. The
// lease table does not rely on the probe: behind any pooler its statements run
// unnamed and its waiters poll.

// poolerProbes is how many times the pinning probe runs.
const poolerProbes = 10

// poolerWait bounds the second read of a probe: a pooler whose pool is held by the
// probe's own other client makes it wait for ever.
const poolerWait = 2 * time.Second

// poolerInfo is what stands between the client and the server.
type poolerInfo struct {
	present bool   // the cancel key names another process than the session
	moved   bool   // a client's session changed between two transactions (not pinned)
	detail  string // what was seen, for messages
}

// pinned reports whether a client keeps one server session from its first
// statement to its last (a direct connection, or a pooler in session mode).
func (p poolerInfo) pinned() bool { return !p.moved }

// what names the pooler for messages.
func (p poolerInfo) what() string {
	switch {
	case !p.present:
		return "no pooler (" + p.detail + ")"
	case p.moved:
		return "a connection pooler in transaction or statement mode (" + p.detail + ")"
	}
	return "a connection pooler that pins sessions (" + p.detail + ")"
}

// findPooler looks for a pooler between cfg's client and the server, with fresh
// connections of cfg (see above). It runs simple-protocol statements only, which
// every pooler passes.
func findPooler(ctx context.Context, cfg *pgx.ConnConfig) (poolerInfo, error) {
	cfg = cfg.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return poolerInfo{}, fmt.Errorf("look for a pooler: %w", err)
	}
	defer closeQuietly(a)
	key := a.PgConn().PID()
	session, err := backendPID(ctx, a)
	if err != nil {
		return poolerInfo{}, fmt.Errorf("look for a pooler: %w", err)
	}
	if session == key {
		return poolerInfo{detail: fmt.Sprintf("the cancel key names the session, process %d", session)}, nil
	}
	p := poolerInfo{present: true, detail: fmt.Sprintf("the cancel key names process %d, the session is process %d", key, session)}
	b, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return p, fmt.Errorf("look for a pooler: %w", err)
	}
	defer closeQuietly(b)
	for range poolerProbes {
		moved, detail, err := probeOnce(ctx, a, b)
		if err != nil {
			return p, fmt.Errorf("look for a pooler: %w", err)
		}
		if moved {
			p.moved, p.detail = true, p.detail+"; "+detail
			return p, nil
		}
	}
	p.detail += fmt.Sprintf("; the client kept its session while another client held a transaction (%d probes)", poolerProbes)
	return p, nil
}

// probeOnce is one pinning probe (see above) for client a; b is the other client.
// a reads its session first, so that a pooler that reuses the session released
// last gives it to b.
func probeOnce(ctx context.Context, a, b *pgx.Conn) (moved bool, detail string, err error) {
	session, err := backendPID(ctx, a)
	if err != nil {
		return false, "", err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, "", err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), poolerWait)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	other, err := backendPID(ctx, tx.Conn())
	if err != nil {
		return false, "", err
	}
	if other == session {
		return true, fmt.Sprintf("another client's transaction got a client's session, process %d", session), nil
	}
	wctx, cancel := context.WithTimeout(ctx, poolerWait)
	again, err := backendPID(wctx, a)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		// The pooler had no session for a while another client's transaction went on.
		return true, fmt.Sprintf("a client waited %v for a session while another client's transaction held one", poolerWait), nil
	case err != nil:
		return false, "", err
	case again != session:
		return true, fmt.Sprintf("a client's session changed from process %d to %d while another client's transaction held process %d", session, again, other), nil
	}
	return false, "", nil
}

func backendPID(ctx context.Context, c interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (uint32, error) {
	var pid uint32
	err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

func closeQuietly(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// refusePooler is the advisory mode's verdict on p: ErrPooler when the pooler
// moves clients between sessions.
func refusePooler(p poolerInfo) error {
	if p.moved {
		return fmt.Errorf("%w: %s; session advisory locks would stay with a session the pooler gives to other clients. "+
			"Connect postgres+advisory:// to PostgreSQL itself (or to a pooler in session mode), or use postgres:// (the lease table works through it)",
			ErrPooler, p.detail)
	}
	return nil
}
