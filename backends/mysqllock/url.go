package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// URL schemes this package registers with dlock.Open.
const (
	// Scheme opens New: mysql://user:pass@host:port/db?table=name&fifo=true. The
	// database is required; the table (default DefaultTable) is created if absent —
	// only then does the user need the CREATE privilege — and with fifo=true
	// (WithFIFO) its queue table too. Both schemes take the TLS parameters
	// (tls=true|false|skip-verify, tls_ca, tls_cert, tls_key, tls_server_name; see
	// docs/connecting.md).
	Scheme = "mysql"
	// GetLockScheme opens NewGetLock:
	// mysql+getlock://user:pass@host:port/db?wait_timeout=30&check_interval=1s&max_conns=100.
	// wait_timeout (whole seconds, 1 to 31536000) is set on every connection: it is
	// how long the server keeps the locks of a client that vanished without closing
	// its connection. check_interval (100ms to 1h) is WithCheckInterval, max_conns (1
	// to 100000) WithMaxConns.
	GetLockScheme = "mysql+getlock"
)

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: openTable, Declare: declareTable, Inspect: inspectTable})
	dlock.Register(dlock.Scheme{Name: GetLockScheme, Open: openGetLock, Declare: declareGetLock, Inspect: inspectGetLock})
}

// parseTable returns the driver configuration and the options of a mysql:// URL.
func parseTable(u *url.URL) (*mysql.Config, []Option, config, error) {
	q, err := dlock.ParseQuery(u, tlsurl.With("table", "fifo")...)
	if err != nil {
		return nil, nil, config{}, err
	}
	cfg, err := dsnConfig(u, q)
	if err != nil {
		return nil, nil, config{}, err
	}
	if cfg.DBName == "" {
		return nil, nil, config{}, fmt.Errorf("%w: %s:// needs a database: %s://user:pass@host:port/db", dlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	var opts []Option
	if t, ok := q["table"]; ok {
		opts = append(opts, WithTable(t))
	}
	if _, ok := q["fifo"]; ok {
		on, err := q.Bool("fifo", false)
		if err != nil {
			return nil, nil, config{}, err
		}
		opts = append(opts, WithFIFO(on))
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, nil, config{}, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	return cfg, opts, c, nil
}

// declareTable: fencing (a per-name counter in the table), per-lease TTLs kept by the
// database clock, refresh, and with fifo=true a queue served in arrival order (FIFO).
// InnoDB keeps the rows across a restart. Semaphores and read-write locks are native
// (a second table), fenced, polled: no order, no writer preference. Elections keep a
// row per term (election.go, a table of their own); a set of keys is one statement
// (multi.go), each key with its own token.
func declareTable(u *url.URL) (spec.Capabilities, error) {
	_, _, c, err := parseTable(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: c.fifo,
		Semaphore: &spec.Primitive{Native: true, Fencing: true},
		RWLock:    &spec.Primitive{Native: true, Fencing: true, WriterPreference: true},
		Election:  &spec.Primitive{Native: true, Fencing: true},
		MultiKey:  &spec.Primitive{Native: true, Fencing: true}}, nil
}

func openTable(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	cfg, opts, c, err := parseTable(u)
	if err != nil {
		return nil, err
	}
	db, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := ensureTable(ctx, db, c, opts); err != nil {
		db.Close()
		return nil, err
	}
	c.ownDB = true
	return newLocker(db, c), nil
}

// defaultWaitTimeout is the server's own wait_timeout default (MariaDB and MySQL):
// how long a silent client's connection, and so its GET_LOCK locks, last.
const defaultWaitTimeout = 8 * time.Hour

// parseGetLock returns the driver configuration, the Locker's configuration and the
// wait_timeout of a mysql+getlock:// URL.
func parseGetLock(u *url.URL) (*mysql.Config, getLockConfig, time.Duration, error) {
	q, err := dlock.ParseQuery(u, tlsurl.With("wait_timeout", "check_interval", "max_conns")...)
	if err != nil {
		return nil, getLockConfig{}, 0, err
	}
	cfg, err := dsnConfig(u, q)
	if err != nil {
		return nil, getLockConfig{}, 0, err
	}
	wait := defaultWaitTimeout
	if _, ok := q["wait_timeout"]; ok {
		n, err := q.Int("wait_timeout", 0, 1, maxWaitTimeout)
		if err != nil {
			return nil, getLockConfig{}, 0, err
		}
		cfg.Params = map[string]string{"wait_timeout": strconv.Itoa(n)}
		wait = time.Duration(n) * time.Second
	}
	c := getLockConfig{ownDB: true}
	if c.maxConns, err = q.Int("max_conns", DefaultMaxConns, 1, maxMaxConns); err != nil {
		return nil, getLockConfig{}, 0, err
	}
	if c.check, err = q.Duration("check_interval", DefaultCheckInterval, minCheckInterval, maxCheckInterval); err != nil {
		return nil, getLockConfig{}, 0, err
	}
	return cfg, c, wait, nil
}

// The bounds of mysql+getlock's parameters. wait_timeout is the server's own range
// (1 to 31536000 seconds, a year). Each check pings the connection: below 100ms the
// checks cost the server more than they tell (and a ping gets as little as one
// interval to answer); above an hour a silent network's loss goes unnoticed for hours
// (the interval is cut to a third of wait_timeout anyway). max_conns goes up to the
// server's own ceiling of max_connections (100000).
const (
	maxWaitTimeout   = 31536000
	minCheckInterval = 100 * time.Millisecond
	maxCheckInterval = time.Hour
	maxMaxConns      = 100000
)

// maxTrialWait is the longest a silent holder's session may outlive it for the fault
// scenarios that wait for a second grant to be exercised (they wait a minute at most).
const maxTrialWait = 50 * time.Second

// declareGetLock: locks last as long as the connection; the server keeps a silent
// client's connection for wait_timeout (8 hours unless the URL sets it, or the
// server's configuration differs); the server queues a name's waiters (FIFO). A
// holder learns that the server restarted (and dropped its lock) as the server's
// process ends and its connection closes, not at its next check, so a server that
// is back within milliseconds still finds the holder's lease ended (ServerRestart,
// with the default check interval and a short one alike).
// Semaphores are the generic ones (slots of named locks): no fencing, no order, and
// limits are not compared. Sets of keys are taken key by key (waiting in one key's
// queue at a time).
func declareGetLock(u *url.URL) (spec.Capabilities, error) {
	_, _, wait, err := parseGetLock(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	caps := spec.Capabilities{SessionTimeout: wait, FIFO: true,
		DeletionSeen: spec.SeenBySession, // the lock is the connection's: deleting it is killing that
		Semaphore:    &spec.Primitive{Native: false, Weaknesses: []spec.Property{spec.SemaphoreConflict}},
		MultiKey:     &spec.Primitive{}}
	if wait > maxTrialWait {
		why := fmt.Sprintf("the server keeps a silent holder's lock for wait_timeout (%v): no second client is granted within a trial (wait_timeout=2 shows what happens when it ends)", wait)
		caps.Inapplicable = map[spec.Scenario]string{spec.HolderPause: why, spec.Partition: why}
	}
	return caps, nil
}

func openGetLock(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	cfg, c, _, err := parseGetLock(u)
	if err != nil {
		return nil, err
	}
	db, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newGetLockLocker(db, c), nil
}

// ensureTable creates the lock table (and, in the fair mode, its queue table) unless
// it exists: tables an administrator created in advance need no CREATE privilege
// (Migrate would need it even then: the server checks it before it looks for the
// table). A user without privileges on a missing table is told it is denied SELECT,
// not that the table is missing: then too the tables are created, or the CREATE's
// refusal returned.
func ensureTable(ctx context.Context, db *sql.DB, c config, opts []Option) error {
	tables := []string{c.table}
	if c.fifo {
		tables = append(tables, c.table+QueueSuffix)
	}
	for _, table := range tables {
		_, err := db.ExecContext(ctx, "SELECT 1 FROM "+quoteIdent(table)+" LIMIT 0")
		var me *mysql.MySQLError
		switch {
		case err == nil:
			continue
		case errors.As(err, &me) && (me.Number == erNoSuchTable || me.Number == erTableAccessDenied):
			return Migrate(ctx, db, opts...)
		}
		return fmt.Errorf("mysqllock: table %s: %w", quoteIdent(table), err)
	}
	return nil
}

// The server's error numbers for a missing table (ER_NO_SUCH_TABLE) and a command
// denied on a table (ER_TABLEACCESS_DENIED_ERROR).
const (
	erNoSuchTable       = 1146
	erTableAccessDenied = 1142
)

// dsnConfig turns user:pass@host:port/db and the TLS parameters of q into a driver
// configuration.
func dsnConfig(u *url.URL, q map[string]string) (*mysql.Config, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("%w: %s:// needs a host: %s://user:pass@host:port/db", dlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	cfg := mysql.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil || strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("%w: %s:// takes one host[:port], not %q", dlock.ErrInvalidURL, u.Scheme, u.Host)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		if cfg.User == "" && cfg.Passwd != "" {
			return nil, fmt.Errorf("%w: %s:// has a password but no user name", dlock.ErrInvalidURL, u.Scheme)
		}
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, fmt.Errorf("%w: %s:// path %q: want one database name", dlock.ErrInvalidURL, u.Scheme, u.Path)
	}
	cfg.DBName = db
	cfg.Timeout = 10 * time.Second
	tc, err := tlsurl.Config(q, false)
	if err != nil {
		return nil, err
	}
	cfg.TLS = tc
	return cfg, nil
}

// connect opens a pool for cfg and checks that the server answers.
func connect(ctx context.Context, cfg *mysql.Config) (*sql.DB, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	db := sql.OpenDB(conn)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("mysqllock: connect to %s: %w", cfg.Addr, err)
	}
	return db, nil
}
