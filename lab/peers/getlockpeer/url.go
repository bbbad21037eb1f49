package getlockpeer

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lab/peers/internal/peerurl"
	"github.com/dlock-go/dlock/spec"
)

// Scheme is the URL scheme this package registers with dlock.Open:
// peer+getlock://user:password@host:port[/database]. It takes no query parameters.
// The opener pings the server; the Locker's Close closes the *sql.DB it made.
const Scheme = "peer+getlock"

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: open, Declare: declare})
}

// parseURL returns the driver configuration of u.
func parseURL(u *url.URL) (*mysql.Config, error) {
	if _, err := dlock.ParseQuery(u); err != nil {
		return nil, err
	}
	host, err := peerurl.Host(u)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr = "tcp", host
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if cfg.User == "" && cfg.Passwd != "" {
		return nil, fmt.Errorf("%w: %s has a password but no user name", dlock.ErrInvalidURL, Scheme)
	}
	cfg.DBName = strings.Trim(u.Path, "/")
	return cfg, nil
}

func open(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	db := sql.OpenDB(connector)
	if err := peerurl.Ping(ctx, Scheme, db.PingContext, db.Close); err != nil {
		return nil, err
	}
	return peerurl.Owning(New(db), db.Close), nil
}

// declare: locks as long as the connection, no fencing, a name's waiters queued by
// the server (FIFO). A cut connection frees its lock at once with its client told
// nothing (DoneAndErr, DeadlockFreedom); names end at the first NUL and are limited
// to 64 characters (KeyIsolation, InputValidation). A paused or cut-off holder's
// connection stays open for the server, which keeps its lock for wait_timeout (8
// hours by default): no trial sees a second grant, so HolderPause and Partition are
// not applicable (the lock is unavailable instead). A cancelled Acquire closes
// its connection while GET_LOCK waits on the server, which notices only when its
// wait's one-second slice ends: released before that, the lock goes to the
// abandoned wait, whose thread then finds the connection gone and frees it — a
// window of microseconds in which another client's TryAcquire fails (Cancellation,
// in some runs: whether the TryAcquire lands in that window is a race between two
// server threads and the client; the campaign saw it, a CI run under -race did not
// in 400 tries).
func declare(u *url.URL) (spec.Capabilities, error) {
	if _, err := parseURL(u); err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{FIFO: true, Weaknesses: []spec.Property{spec.DeadlockFreedom, spec.KeyIsolation, spec.InputValidation, spec.DoneAndErr},
		HarnessOnly:   []spec.Property{spec.DeadlockFreedom, spec.DoneAndErr},
		SometimesWeak: []spec.Property{spec.Cancellation},
		// Nothing tells a holder whose connection hangs (StoreHang: Done stays open).
		FaultOutcomes: map[spec.Scenario]spec.Status{spec.StoreHang: spec.Violated},
		// The server keeps the lock of a client whose connection is open but silent
		// (paused, cut off) for the session's wait_timeout — 8 hours by default, which
		// the peer, as users write it, does not change — so no second client is
		// granted within any trial's bound, and these scenarios cannot be exercised.
		Inapplicable: map[spec.Scenario]string{
			spec.HolderPause: "the server keeps a paused holder's lock for wait_timeout (8 h by default): no second client is granted within a trial",
			spec.Partition:   "the server keeps a cut-off holder's lock for wait_timeout (8 h by default): no second client is granted within a trial",
		}}, nil
}
