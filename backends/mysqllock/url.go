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
	"github.com/dlock-go/dlock/internal/tlsurl"
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
	// wait_timeout (whole seconds) is set on every connection: it is how long the
	// server keeps the locks of a client that vanished without closing its connection.
	// check_interval is WithCheckInterval, max_conns WithMaxConns.
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
	if v, ok := q["fifo"]; ok {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, config{}, fmt.Errorf("%w: fifo=%q: want true or false", dlock.ErrInvalidURL, v)
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
		RWLock:    &spec.Primitive{Native: true, Fencing: true, Weaknesses: []spec.Property{spec.WriterProgress}},
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
	if v, ok := q["wait_timeout"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, getLockConfig{}, 0, fmt.Errorf("%w: wait_timeout=%q: want whole seconds >= 1", dlock.ErrInvalidURL, v)
		}
		cfg.Params = map[string]string{"wait_timeout": v}
		wait = time.Duration(n) * time.Second
	}
	c := getLockConfig{check: DefaultCheckInterval, maxConns: DefaultMaxConns, ownDB: true}
	if v, ok := q["max_conns"]; ok {
		if c.maxConns, err = strconv.Atoi(v); err != nil || c.maxConns < 1 {
			return nil, getLockConfig{}, 0, fmt.Errorf("%w: max_conns=%q: want a number of connections >= 1", dlock.ErrInvalidURL, v)
		}
	}
	if v, ok := q["check_interval"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, getLockConfig{}, 0, fmt.Errorf("%w: check_interval=%q: want a positive duration such as 1s", dlock.ErrInvalidURL, v)
		}
		c.check = d
	}
	return cfg, c, wait, nil
}

// declareGetLock: locks last as long as the connection; the server keeps a silent
// client's connection for wait_timeout (8 hours unless the URL sets it, or the
// server's configuration differs); the server queues a name's waiters (FIFO). A
// holder learns that the server restarted (and dropped its lock) at its next
// connection check: a server that restarts within two check intervals can grant the
// lock to another client first — with the default 1s interval a local MariaDB does
// (ServerRestart on "mysql+getlock (defaults)"), with 100ms it does not.
// Semaphores are the generic ones (slots of named locks): no fencing, no order, and
// limits are not compared. Sets of keys are taken key by key (waiting in one key's
// queue at a time).
func declareGetLock(u *url.URL) (spec.Capabilities, error) {
	_, c, wait, err := parseGetLock(u)
	if err != nil {
		return spec.Capabilities{}, err
	}
	caps := spec.Capabilities{SessionTimeout: wait, FIFO: true,
		Semaphore: &spec.Primitive{Native: false, Weaknesses: []spec.Property{spec.SemaphoreConflict}},
		MultiKey:  &spec.Primitive{}}
	if c.check >= 250*time.Millisecond {
		caps.FaultOutcomes = map[spec.Scenario]spec.Status{spec.ServerRestart: spec.Sometimes}
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
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
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
