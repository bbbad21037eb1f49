package servers

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL is one MariaDB server (mariadbd), or an external MySQL/MariaDB given by
// DLOCK_MYSQL_DSN. Clients connect as root over TCP to 127.0.0.1. Restart(keepData
// false) replaces its data with a fresh initialised copy.
type MySQL struct {
	Process // temp root: data/, mariadb.log, sock
	addr    string

	extCfg *mysql.Config // external: the DSN from the environment
}

// Addr is host:port.
func (m *MySQL) Addr() string { return m.addr }

func (m *MySQL) dataDir() string { return filepath.Join(m.dir, "data") }

func externalMySQL(dsn string) (*MySQL, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("DLOCK_MYSQL_DSN: %w", err)
	}
	return &MySQL{addr: cfg.Addr, extCfg: cfg}, nil
}

var mariadbTemplate struct {
	mu   sync.Mutex
	dirs map[string]string // by image ("": the local binary)
}

// mariadbInstallArgs are the mariadb-install-db flags after --datadir.
var mariadbInstallArgs = []string{"--user=root", "--auth-root-authentication-method=normal",
	"--skip-test-db", "--skip-name-resolve", "--innodb-log-file-size=16M"}

// mariadbTemplateDir returns an initialised MariaDB data directory that
// servers copy (much faster than running mariadb-install-db each time). It is
// made once per machine and MariaDB build, in the user cache directory
// ($XDG_CACHE_HOME/dlock or ~/.cache/dlock), keyed by the mariadbd binary and
// the install flags; delete that directory to rebuild it.
//
// For servers in containers (image not "") the template is made by the image's own
// mariadb-install-db, in a container, and keyed by the image's content.
func mariadbTemplateDir(ctx context.Context, mariadbd, image string) (string, error) {
	t := &mariadbTemplate
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.dirs[image]; d != "" {
		return d, nil
	}
	h := sha256.New()
	var install string
	if image != "" {
		content, err := imageContent(image)
		if err != nil {
			return "", err
		}
		install = "mariadb-install-db"
		fmt.Fprintf(h, "image %s|%s", content, strings.Join(mariadbInstallArgs, " "))
	} else {
		var err error
		install, err = lookPath("mariadb-install-db")
		if err != nil {
			install, err = lookPath("mysql_install_db")
		}
		if err != nil {
			return "", missing("mariadb-install-db", "mariadb-server")
		}
		st, err := os.Stat(mariadbd)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s|%d|%d|%s|%s", mariadbd, st.Size(), st.ModTime().UnixNano(), install, strings.Join(mariadbInstallArgs, " "))
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "dlock")
	final := filepath.Join(root, fmt.Sprintf("mariadb-template-%x", h.Sum(nil)[:8]))
	if t.dirs == nil {
		t.dirs = map[string]string{}
	}
	if _, err := os.Stat(filepath.Join(final, "complete")); err == nil {
		t.dirs[image] = filepath.Join(final, "data")
		return t.dirs[image], nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, "mariadb-template-tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // no-op once renamed
	args := append([]string{"--no-defaults", "--datadir=" + filepath.Join(tmp, "data")}, mariadbInstallArgs...)
	if image != "" {
		if _, err := runContainerOnce(ctx, "mariadb-install-db", image, "", append([]string{install}, args...), tmp); err != nil {
			return "", err
		}
	} else {
		cmd := exec.CommandContext(ctx, install, args...)
		cmd.SysProcAttr = childAttr()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("mariadb-install-db: %w\n%s", err, tail(string(out), 25))
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another process won the race: use its template.
		if _, serr := os.Stat(filepath.Join(final, "complete")); serr != nil {
			return "", err
		}
	}
	t.dirs[image] = filepath.Join(final, "data")
	return t.dirs[image], nil
}

// StartMySQL starts a MariaDB server on a free loopback port, in a temporary
// copy of an initialised data directory, and waits until it answers a ping.
func StartMySQL(ctx context.Context) (*MySQL, error) { return StartMySQLWith(ctx, MySQLOptions{}) }

// MySQLOptions configures a server started by StartMySQLWith.
type MySQLOptions struct {
	// TLS lets clients connect over TLS with the PKI's server certificate, and
	// checks client certificates against its CA (users created with REQUIRE SSL or
	// REQUIRE X509 must use it; root need not).
	TLS *PKI
	// Args are extra mariadbd arguments, e.g. "--log-bin".
	Args []string
}

// StartMySQLWith starts a MariaDB server configured by o (see StartMySQL).
func StartMySQLWith(ctx context.Context, o MySQLOptions) (*MySQL, error) {
	bin, image, err := command("mariadbd", MariaDBImage, func() (string, error) {
		bin, err := lookPath("mariadbd")
		if err != nil {
			bin, err = lookPath("mysqld")
		}
		if err != nil {
			return "", missing("mariadbd", "mariadb-server")
		}
		return bin, nil
	})
	if err != nil {
		return nil, err
	}
	tmpl, err := mariadbTemplateDir(ctx, bin, image)
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("mariadb")
	if err != nil {
		return nil, err
	}
	m := &MySQL{Process: Process{dir: dir, grace: 30 * time.Second}}
	m.wipe = func() error {
		tmpl, err := mariadbTemplateDir(context.Background(), m.p.path, m.p.image)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(m.dataDir()); err != nil {
			return err
		}
		return copyDir(tmpl, m.dataDir())
	}
	m.relaunch = func(ctx context.Context) error { return m.p.startReady(ctx, m.ready) }
	if err := copyDir(tmpl, m.dataDir()); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	err = onFreePort(ctx, func(port int) (*proc, func(context.Context) error, error) {
		m.addr = hostPort(port)
		m.p = &proc{
			name: "mariadbd " + m.addr,
			path: bin,
			args: []string{
				"--no-defaults",
				"--datadir=" + m.dataDir(),
				"--socket=" + filepath.Join(dir, "sock"),
				"--pid-file=" + filepath.Join(dir, "mariadbd.pid"),
				"--port=" + strconv.Itoa(port),
				"--bind-address=127.0.0.1",
				"--user=root",
				"--skip-log-bin",
				"--skip-name-resolve",
				"--performance-schema=OFF",
				"--innodb-buffer-pool-size=32M",
				"--innodb-log-file-size=16M",
				// Committed data is written to the OS at commit and survives a
				// server crash (Kill), not a machine crash; far fewer fsyncs.
				"--innodb-flush-log-at-trx-commit=2",
				"--innodb-doublewrite=0",
				"--max-connections=1000",
				"--log-error=",
			},
			dir:     dir,
			logPath: filepath.Join(dir, "mariadb.log"),
			image:   image,
			mounts:  o.TLS.mounts(),
		}
		if o.TLS != nil {
			m.p.args = append(m.p.args, "--ssl-ca="+o.TLS.CAFile, "--ssl-cert="+o.TLS.ServerCert, "--ssl-key="+o.TLS.ServerKey)
		}
		m.p.args = append(m.p.args, o.Args...)
		return m.p, m.ready, nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

func (m *MySQL) ready(ctx context.Context) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// DSN returns a go-sql-driver/mysql DSN for database db ("" for none): root
// over TCP, parseTime=true, loc=UTC, a 5s dial timeout.
func (m *MySQL) DSN(db string) string {
	var cfg *mysql.Config
	if m.extCfg != nil {
		cfg = m.extCfg.Clone()
	} else {
		cfg = mysql.NewConfig()
		cfg.User = "root"
		cfg.Net = "tcp"
		cfg.Addr = m.addr
	}
	cfg.DBName = db
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return cfg.FormatDSN()
}

var dbSeq atomic.Int64

// NewDatabase creates a fresh, uniquely named database and returns its DSN.
func (m *MySQL) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("dlock_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, dbSeq.Add(1))
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return "", fmt.Errorf("mysql %s: create database: %w", m.addr, err)
	}
	return m.DSN(name), nil
}

// DropDatabase drops a database made by NewDatabase (name or DSN accepted).
func (m *MySQL) DropDatabase(ctx context.Context, nameOrDSN string) error {
	name := nameOrDSN
	if cfg, err := mysql.ParseDSN(nameOrDSN); err == nil && cfg.DBName != "" {
		name = cfg.DBName
	}
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	return err
}
