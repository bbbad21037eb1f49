package pgadvisorypeer

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+pgadvisory://user:password@host:port[/database] (without a database, the
// server's default: the user's name). It takes no query parameters. The opener
// connects in plain text (no TLS) and takes nothing from the PG* environment
// variables or a password file; its pool has PoolSize connections. It pings the
// server; the Locker's Close closes the pool it made, which waits for pgx to finish
// with every connection: after a statement cancelled on a network that does not
// answer, pgx's cleanup (a cancel request, then closing) takes up to 15 seconds.
const Scheme = "peer+pgadvisory"

// PoolSize is how many connections the opener's pool keeps at most: each held or
// waiting lease keeps one (pgxpool's default, 4 or the number of CPUs, would hold
// that many locks at most). It is PostgreSQL's default max_connections, which every
// client of the server shares.
const PoolSize = 100

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// parseURL returns the pool configuration of u.
func parseURL(u *url.URL) (*pgxpool.Config, error) {
	if _, err := dlock.ParseQuery(u); err != nil {
		return nil, err
	}
	addr, err := peerurl.Host(u)
	if err != nil {
		return nil, err
	}
	host, portText, _ := net.SplitHostPort(addr) // Host checked it
	port, err := strconv.ParseUint(portText, 10, 16)
	if host == "" || err != nil || port == 0 {
		return nil, fmt.Errorf("%w: %s: host %q: want host:port, the port from 1 to 65535", dlock.ErrInvalidURL, Scheme, addr)
	}
	user := u.User.Username()
	password, _ := u.User.Password()
	if user == "" {
		return nil, fmt.Errorf("%w: %s:// needs a user name: %s://user:password@host:port/database", dlock.ErrInvalidURL, Scheme, Scheme)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.ContainsRune(user+password+db, 0) { // the startup message's strings end at NUL
		return nil, fmt.Errorf("%w: %s: a NUL byte in the user name, the password or the database", dlock.ErrInvalidURL, Scheme)
	}
	// An empty configuration, then every field that PG* variables or a password file
	// could have set is set from the URL.
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", dlock.ErrInvalidURL, Scheme, err)
	}
	cc := cfg.ConnConfig
	cc.Host, cc.Port, cc.Database, cc.User, cc.Password = host, uint16(port), db, user, password
	cc.TLSConfig, cc.Fallbacks = nil, nil
	cfg.MaxConns = PoolSize
	return cfg, nil
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", dlock.ErrUnavailable, Scheme, err)
	}
	closePool := func() error { pool.Close(); return nil }
	if err := peerurl.Ping(ctx, Scheme, pool.Ping, closePool); err != nil {
		return nil, err
	}
	return peerurl.Owning(New(pool), closePool), nil
}

// declare: locks as long as the session, no fencing, a lock's waiters queued by the
// server (FIFO). A cut connection frees its lock at once with its client told
// nothing (DoneAndErr, DeadlockFreedom); a key with a NUL byte is refused by
// PostgreSQL's text type (KeyIsolation: "k\x00" fails while "k" is held;
// InputValidation). A cancelled Acquire returns before the server has heard of the
// cancel, which may still grant the abandoned wait the lock (Cancellation). A paused
// or cut-off holder's session stays open for the server, which keeps its lock: no
// trial sees a second grant, so HolderPause and Partition are not applicable. Nothing
// tells a holder whose connection hangs (StoreHang: Done stays open).
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{FIFO: true,
		Weaknesses:    []spec.Property{spec.DeadlockFreedom, spec.Cancellation, spec.KeyIsolation, spec.InputValidation, spec.DoneAndErr},
		HarnessOnly:   []spec.Property{spec.DeadlockFreedom, spec.DoneAndErr},
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.StoreHang: spec.Violated},
		// The server keeps the session of a client whose connection is open but
		// silent: a paused process's kernel still answers TCP keepalives, and a
		// cut-off client's session lasts until keepalive gives up on it. Only
		// idle_session_timeout would end either sooner, and it is off by default,
		// which the peer, as users write it, does not change. So no second client is
		// granted within any trial's bound, and these scenarios cannot be exercised.
		Inapplicable: map[spec.Scenario]string{
			spec.HolderPause: "the server keeps a paused holder's session, and its lock, while its connection is open (idle_session_timeout is off by default): no second client is granted within a trial",
			spec.Partition:   "the server keeps a cut-off holder's session, and its lock, until TCP keepalive gives up on it (hours by default; idle_session_timeout is off): no second client is granted within a trial",
		}}, nil
}
