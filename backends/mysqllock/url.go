package mysqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock-go/dlock"
)

// URL schemes this package registers with dlock.Open.
const (
	// Scheme opens New: mysql://user:pass@host:port/db?table=name. The database is
	// required; the table (default DefaultTable) is created if absent.
	Scheme = "mysql"
	// GetLockScheme opens NewGetLock:
	// mysql+getlock://user:pass@host:port/db?wait_timeout=30&check_interval=1s.
	// wait_timeout (whole seconds) is set on every connection: it is how long the
	// server keeps the locks of a client that vanished without closing its connection.
	GetLockScheme = "mysql+getlock"
)

func init() {
	dlock.Register(Scheme, openTable)
	dlock.Register(GetLockScheme, openGetLock)
}

func openTable(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	if err := dlock.CheckQuery(u, "table"); err != nil {
		return nil, err
	}
	cfg, err := dsnConfig(u)
	if err != nil {
		return nil, err
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("%w: %s:// needs a database: %s://user:pass@host:port/db", dlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	var opts []Option
	if t := u.Query().Get("table"); t != "" {
		opts = append(opts, WithTable(t))
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	db, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := Migrate(ctx, db, opts...); err != nil {
		db.Close()
		return nil, err
	}
	c.ownDB = true
	return newLocker(db, c), nil
}

func openGetLock(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	if err := dlock.CheckQuery(u, "wait_timeout", "check_interval"); err != nil {
		return nil, err
	}
	cfg, err := dsnConfig(u)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	if v := q.Get("wait_timeout"); v != "" {
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			return nil, fmt.Errorf("%w: wait_timeout=%q: want whole seconds >= 1", dlock.ErrInvalidURL, v)
		}
		cfg.Params = map[string]string{"wait_timeout": v}
	}
	c := getLockConfig{check: DefaultCheckInterval, ownDB: true}
	if v := q.Get("check_interval"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: check_interval=%q: want a positive duration such as 1s", dlock.ErrInvalidURL, v)
		}
		c.check = d
	}
	db, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newGetLockLocker(db, c), nil
}

// dsnConfig turns user:pass@host:port/db into a driver configuration.
func dsnConfig(u *url.URL) (*mysql.Config, error) {
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
