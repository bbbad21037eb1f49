package servers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresOptions configures a server started by StartPostgres.
type PostgresOptions struct {
	// TLS makes the server offer TLS with the PKI's server certificate (ssl=on) and
	// check client certificates against its CA (clientcert in pg_hba.conf lines of
	// HBA asks for them). Plain connections stay possible unless HBA refuses them.
	TLS *PKI
	// HBA are pg_hba.conf lines placed before the defaults (which trust every
	// connection from this machine, replication included): the first line that
	// matches a connection decides.
	HBA []string
	// Settings are extra server settings, "name=value" each (postgres -c), e.g.
	// "synchronous_standby_names=*".
	Settings []string
}

// Postgres is one PostgreSQL server (postgres, from Debian's postgresql-15), or an
// external one named by DLOCK_POSTGRES_URL. Its superuser is "postgres", trusted
// from this machine without a password (unless PostgresOptions.HBA says
// otherwise). Stop is a fast shutdown (SIGINT: sessions are ended, the data kept);
// Restart(keepData false) initialises a fresh data directory. A replica
// (StartPostgresReplicaPair) streams from its primary through a proxy (Link) and can
// be paused and promoted.
type Postgres struct {
	Process // temp root: data/, postgres.log, the socket, tls/
	addr    string
	opts    PostgresOptions
	place   pgPlace  // where its programs run
	ext     *url.URL // external: DLOCK_POSTGRES_URL

	// A replica's primary, its streaming link, and whether replay is paused; set
	// once by StartPostgresReplicaPair.
	primary *Postgres
	link    *Proxy
	syncRep bool

	mu       sync.Mutex
	promoted bool
}

// Addr is host:port.
func (p *Postgres) Addr() string { return p.addr }

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }

// EnvPostgresURL names an external PostgreSQL server (a postgres:// URL of a user
// allowed to CREATE DATABASE) that SharedPostgres uses instead of starting one.
const EnvPostgresURL = "DLOCK_POSTGRES_URL"

// postgresBin is the directory of Debian's PostgreSQL 15 programs: neither postgres
// nor initdb is on PATH there.
const postgresBin = "/usr/lib/postgresql/15/bin"

// postgresProgram finds one of PostgreSQL's programs: in postgresBin, else on PATH.
func postgresProgram(name string) (string, error) {
	p := filepath.Join(postgresBin, name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return p, nil
	}
	if p, err := lookPath(name); err == nil {
		return p, nil
	}
	return "", missing(name, "postgresql-15")
}

// serverUser is whom the PostgreSQL programs (and PgBouncer) run as: they refuse to
// run as root, so a root process runs them as the "postgres" user (which Debian's
// postgresql package creates); any other user runs them as itself (nil).
func serverUser() (*syscall.Credential, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, &MissingError{What: `the "postgres" user (PostgreSQL refuses to run as root)`,
			Install: "sudo apt-get install -y --no-install-recommends postgresql-15 (it creates the user; or: make deps)"}
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("servers: the postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// pgPlace is where PostgreSQL's programs (and PgBouncer) run: on this machine as
// owner (nil: as this process), or, with img set, in containers of img as the
// image's "postgres" user, whose uid and gid (owner) own the server's files.
type pgPlace struct {
	img   string
	owner *syscall.Credential
}

// placePostgres decides where what (PostgreSQL or PgBouncer) runs: DLOCK_SERVERS,
// else the local programs when local finds them, else image's containers.
func placePostgres(what string, image Image, local func() error) (pgPlace, error) {
	if dockerOnly() && image.Name() == "" {
		return pgPlace{}, &NoImageError{What: what}
	}
	src, err := sourceFor(what, func() error {
		if err := local(); err != nil {
			return err
		}
		_, err := serverUser()
		return err
	})
	if err != nil {
		return pgPlace{}, err
	}
	if src == fromLocal {
		owner, err := serverUser()
		return pgPlace{owner: owner}, err
	}
	img := image.Name()
	if img == "" {
		return pgPlace{}, &NoImageError{What: what}
	}
	owner, err := containerUser(img, "postgres")
	if err != nil {
		return pgPlace{}, err
	}
	return pgPlace{img: img, owner: owner}, nil
}

// program is the path of one of PostgreSQL's programs here.
func (pl pgPlace) program(name string) (string, error) {
	if pl.img != "" {
		return filepath.Join(postgresBin, name), nil
	}
	return postgresProgram(name)
}

// run runs a program to its end in dir (see runAs).
func (pl pgPlace) run(ctx context.Context, dir, path string, args ...string) error {
	if pl.img != "" {
		_, err := runContainerOnce(ctx, filepath.Base(path), pl.img, "postgres", append([]string{path}, args...), dir)
		return err
	}
	return runAs(ctx, pl.owner, dir, path, args...)
}

// proc is the handle of a server program that runs here.
func (pl pgPlace) proc(name, path string, args []string, dir, logPath string) *proc {
	p := &proc{name: name, path: path, args: args, dir: dir, logPath: logPath, stopSignal: syscall.SIGINT}
	if pl.img != "" {
		p.image, p.ctrUser = pl.img, "postgres"
	} else {
		p.cred = pl.owner
	}
	return p
}

// ownTree gives the tree at dir to cred's user (nothing for nil).
func ownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
}

// runAs runs a program to its end as cred's user, returning its output's tail in
// the error.
func runAs(ctx context.Context, cred *syscall.Credential, dir, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = childAttr()
	cmd.SysProcAttr.Credential = cred
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(path), err, tail(string(out), 25))
	}
	return nil
}

// StartPostgres starts a PostgreSQL server configured by o on a free loopback port:
// initdb in a temporary directory (trust authentication from this machine, UTF8,
// locale C), then postgres listening on 127.0.0.1 only, its unix socket in the
// directory, fsync off (a committed row survives the server's crash, not the
// machine's), streaming replication allowed. It returns once the server answers a
// query.
func StartPostgres(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	place, err := placePostgres("PostgreSQL", PostgresImage, func() error {
		_, err := postgresProgram("initdb")
		return err
	})
	if err != nil {
		return nil, err
	}
	initdb, err := place.program("initdb")
	if err != nil {
		return nil, err
	}
	p, err := newPostgres(o, place)
	if err != nil {
		return nil, err
	}
	p.wipe = func() error {
		if err := os.RemoveAll(p.dataDir()); err != nil {
			return err
		}
		return p.initData(context.Background(), initdb)
	}
	if err := p.initData(ctx, initdb); err != nil {
		os.RemoveAll(p.dir)
		return nil, err
	}
	if err := p.launch(ctx); err != nil {
		os.RemoveAll(p.dir)
		return nil, err
	}
	return p, nil
}

// newPostgres makes the handle and temporary directory of a server (owned by the
// place's owner), not yet started.
func newPostgres(o PostgresOptions, place pgPlace) (*Postgres, error) {
	bin, err := place.program("postgres")
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("postgres")
	if err != nil {
		return nil, err
	}
	p := &Postgres{Process: Process{dir: dir, grace: 30 * time.Second}, opts: o, place: place}
	p.p = place.proc("", bin, nil, dir, filepath.Join(dir, "postgres.log"))
	p.relaunch = func(ctx context.Context) error { return p.p.startReady(ctx, p.ready) }
	p.onClose = func() {
		if p.link != nil {
			p.link.Close()
		}
	}
	if o.TLS != nil {
		// The server reads its key only if it is private to it: copies of the PKI's
		// files, owned by the server's user.
		tlsDir := filepath.Join(dir, "tls")
		if err := os.Mkdir(tlsDir, 0o700); err == nil {
			for _, f := range []struct{ src, dst string }{{o.TLS.ServerCert, "server.pem"}, {o.TLS.ServerKey, "server-key.pem"}, {o.TLS.CAFile, "ca.pem"}} {
				if err = copyFile(f.src, filepath.Join(tlsDir, f.dst), 0o600); err != nil {
					break
				}
			}
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("servers: postgres TLS files: %w", err)
		}
	}
	if err := ownTree(dir, place.owner); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// initData runs initdb into the data directory and writes pg_hba.conf.
func (p *Postgres) initData(ctx context.Context, initdb string) error {
	if err := p.place.run(ctx, p.dir, initdb, "-D", p.dataDir(), "-U", "postgres", "--auth=trust",
		"--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C"); err != nil {
		return fmt.Errorf("servers: %w", err)
	}
	return p.writeHBA(p.place.owner)
}

// defaultHBA trusts every connection from this machine, replication included.
var defaultHBA = []string{
	"local all all trust",
	"host all all 127.0.0.1/32 trust",
	"host all all ::1/128 trust",
	"local replication all trust",
	"host replication all 127.0.0.1/32 trust",
}

func (p *Postgres) writeHBA(cred *syscall.Credential) error {
	path := filepath.Join(p.dataDir(), "pg_hba.conf")
	lines := append(append([]string{"# written by internal/servers"}, p.opts.HBA...), defaultHBA...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return ownTree(path, cred)
}

// launch starts the server on a free port (another one if it was taken meanwhile).
func (p *Postgres) launch(ctx context.Context) error {
	return onFreePort(ctx, func(port int) (*proc, func(context.Context) error, error) {
		p.addr = hostPort(port)
		p.p.name = "postgres " + p.addr
		p.p.args = p.args(port)
		return p.p, p.ready, nil
	})
}

// args is the server's command line on port.
func (p *Postgres) args(port int) []string {
	a := []string{"-D", p.dataDir(), "-p", strconv.Itoa(port), "-k", p.dir}
	for _, s := range []string{
		"listen_addresses=127.0.0.1",
		"fsync=off", "full_page_writes=off", // a crash of the server loses nothing committed; of the machine, anything
		"shared_buffers=16MB", "max_connections=400",
		"wal_level=replica", "max_wal_senders=5", "hot_standby=on", "wal_keep_size=64MB",
		"log_destination=stderr", "logging_collector=off", "log_min_messages=warning",
	} {
		a = append(a, "-c", s)
	}
	if o := p.opts; o.TLS != nil {
		tlsDir := filepath.Join(p.dir, "tls")
		a = append(a, "-c", "ssl=on", "-c", "ssl_cert_file="+filepath.Join(tlsDir, "server.pem"),
			"-c", "ssl_key_file="+filepath.Join(tlsDir, "server-key.pem"), "-c", "ssl_ca_file="+filepath.Join(tlsDir, "ca.pem"))
	}
	for _, s := range p.opts.Settings {
		a = append(a, "-c", s)
	}
	return a
}

// ready is a real query as the superuser.
func (p *Postgres) ready(ctx context.Context) error {
	c, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var one int
	return c.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// URL returns a postgres:// URL of database db as the superuser, without TLS
// (sslmode=disable), for tests and for pgx.
func (p *Postgres) URL(db string) string {
	if p.ext != nil {
		u := *p.ext
		u.Path = "/" + db
		return u.String()
	}
	return "postgres://postgres@" + p.addr + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// Exec runs statements as the superuser on database db ("" for postgres), one after
// another on one connection.
func (p *Postgres) Exec(ctx context.Context, db string, statements ...string) error {
	if db == "" {
		db = "postgres"
	}
	c, err := pgx.Connect(ctx, p.URL(db))
	if err != nil {
		return fmt.Errorf("postgres %s: %w", p.addr, err)
	}
	defer c.Close(context.Background())
	for _, s := range statements {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres %s: %w", p.addr, err)
		}
	}
	return nil
}

var pgDBSeq atomic.Int64

// NewDatabase creates a fresh, uniquely named database and returns its name.
func (p *Postgres) NewDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("dlock_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, pgDBSeq.Add(1))
	if err := p.Exec(ctx, "", `CREATE DATABASE "`+name+`"`); err != nil {
		return "", err
	}
	return name, nil
}

// DropDatabase drops a database made by NewDatabase, ending its sessions first.
func (p *Postgres) DropDatabase(ctx context.Context, name string) error {
	return p.Exec(ctx, "", `DROP DATABASE IF EXISTS "`+strings.ReplaceAll(name, `"`, `""`)+`" WITH (FORCE)`)
}

func externalPostgres(raw string) (*Postgres, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("%s: want a postgres:// URL", EnvPostgresURL)
	}
	return &Postgres{addr: u.Host, ext: u}, nil
}

// StartPostgresReplicaPair starts a primary and a streaming replica of it. The
// replica is a pg_basebackup of the primary that streams through a proxy (Link), so
// that PauseReplication can hold the stream back. With sync, the primary waits for
// the replica to have flushed every commit before it answers
// (synchronous_standby_names=*; a held-back stream then holds every commit back), and
// PauseReplication pauses the replica's replay instead: the replica keeps every
// acknowledged commit, as synchronous replication promises, but applies none of them
// until it is promoted. It returns once the replica has replayed everything the
// primary had.
func StartPostgresReplicaPair(ctx context.Context, sync bool) (primary, replica *Postgres, err error) {
	o := PostgresOptions{}
	if sync {
		o.Settings = []string{"synchronous_standby_names=*", "synchronous_commit=on"}
	}
	primary, err = StartPostgres(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	replica, err = startReplica(ctx, primary)
	if err != nil {
		primary.Close()
		return nil, nil, err
	}
	replica.syncRep = sync
	return primary, replica, nil
}

// startReplica makes a replica of primary (see StartPostgresReplicaPair).
func startReplica(ctx context.Context, primary *Postgres) (*Postgres, error) {
	basebackup, err := primary.place.program("pg_basebackup")
	if err != nil {
		return nil, err
	}
	link, err := NewProxy(primary.Addr())
	if err != nil {
		return nil, err
	}
	r, err := newPostgres(PostgresOptions{}, primary.place)
	if err != nil {
		link.Close()
		return nil, err
	}
	r.primary, r.link = primary, link
	host, port, _ := strings.Cut(link.Addr(), ":")
	r.wipe = func() error {
		return errors.New("servers: a replica's data cannot be wiped (it is its primary's copy)")
	}
	fail := func(err error) (*Postgres, error) {
		link.Close()
		os.RemoveAll(r.dir)
		return nil, err
	}
	// -R writes standby.signal and primary_conninfo (the link's address).
	if err := r.place.run(ctx, r.dir, basebackup, "-h", host, "-p", port, "-U", "postgres", "-D", r.dataDir(),
		"-X", "stream", "-R", "--checkpoint=fast", "--no-sync"); err != nil {
		return fail(fmt.Errorf("servers: %w", err))
	}
	if err := r.launch(ctx); err != nil {
		return fail(err)
	}
	if err := r.WaitInSync(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// replicaOnly is the error of a replica's method called on a primary.
func (p *Postgres) replicaOnly() error {
	if p.primary == nil {
		return fmt.Errorf("servers: postgres %s is not a replica", p.addr)
	}
	return nil
}

// Link is a replica's replication link (its stream from the primary goes through
// it), nil for a primary.
func (p *Postgres) Link() *Proxy { return p.link }

// PauseReplication makes the replica lag: an asynchronous replica's stream is held
// back (Link().Stall()); a synchronous one (StartPostgresReplicaPair with sync)
// stops replaying what it receives (pg_wal_replay_pause), which the primary does
// not wait for.
func (p *Postgres) PauseReplication(ctx context.Context) error {
	if err := p.replicaOnly(); err != nil {
		return err
	}
	if p.syncRep {
		return p.Exec(ctx, "", "SELECT pg_wal_replay_pause()")
	}
	p.link.Stall()
	return nil
}

// ResumeReplication undoes PauseReplication and waits until the replica is in sync.
func (p *Postgres) ResumeReplication(ctx context.Context) error {
	if err := p.replicaOnly(); err != nil {
		return err
	}
	if p.syncRep {
		if err := p.Exec(ctx, "", "SELECT pg_wal_replay_resume()"); err != nil {
			return err
		}
	} else {
		p.link.Restore()
	}
	return p.WaitInSync(ctx)
}

// WaitInSync waits until the replica has replayed every change the primary had
// written when WaitInSync was called.
func (p *Postgres) WaitInSync(ctx context.Context) error {
	if err := p.replicaOnly(); err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var target string
	if err := queryOne(ctx, p.primary.URL("postgres"), "SELECT pg_current_wal_lsn()::text", &target); err != nil {
		return err
	}
	var last error
	err := poll(ctx, pollInterval, func(ctx context.Context) bool {
		var caught bool
		last = queryOne(ctx, p.URL("postgres"), "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", &caught, target)
		return last == nil && caught
	})
	if err != nil {
		return fmt.Errorf("servers: replica %s not in sync with %s: %w (last: %v)", p.addr, p.primary.addr, err, last)
	}
	return nil
}

// Promote makes the replica a primary (pg_promote, which replays what it has
// received first) and returns once it accepts writes. Its link is closed.
func (p *Postgres) Promote(ctx context.Context) error {
	if err := p.replicaOnly(); err != nil {
		return err
	}
	var ok bool
	if err := queryOne(ctx, p.URL("postgres"), "SELECT pg_promote(true, 60)", &ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("servers: replica %s: pg_promote did not finish within 60s", p.addr)
	}
	p.link.Close()
	p.mu.Lock()
	p.promoted = true
	p.mu.Unlock()
	return nil
}

// queryOne runs one query on a fresh connection to dsn and scans its one row.
func queryOne(ctx context.Context, dsn, q string, dst any, args ...any) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, q, args...).Scan(dst)
}

// PgBouncer is one pgbouncer in front of a PostgreSQL server.
type PgBouncer struct {
	Process // temp root: pgbouncer.ini, userlist.txt, pgbouncer.log
	addr    string
	mode    string
}

// Addr is host:port.
func (b *PgBouncer) Addr() string { return b.addr }

// Mode is its pool_mode: session, transaction or statement.
func (b *PgBouncer) Mode() string { return b.mode }

// URL returns a postgres:// URL of database db through the pooler, as the
// superuser (postgres).
func (b *PgBouncer) URL(db string) string {
	return "postgres://postgres@" + b.addr + "/" + url.PathEscape(db) + "?sslmode=disable"
}

// StartPgBouncer starts pgbouncer (Debian's package) on a free loopback port in
// front of the server at target (host:port), pooling in mode (session,
// transaction or statement) every database of it, as whatever user connects
// (trusted, as the server trusts it; users listed in users are accepted too).
func StartPgBouncer(ctx context.Context, target, mode string, users ...string) (*PgBouncer, error) {
	switch mode {
	case "session", "transaction", "statement":
	default:
		return nil, fmt.Errorf("servers: pgbouncer pool_mode %q: want session, transaction or statement", mode)
	}
	bin := "/usr/sbin/pgbouncer" // in PgBouncerImage
	place, err := placePostgres("PgBouncer", PgBouncerImage, func() error {
		var err error
		if bin, err = lookPath("pgbouncer"); err != nil {
			return missing("pgbouncer", "pgbouncer")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if place.img != "" {
		bin = "/usr/sbin/pgbouncer"
	}
	dir, err := tempDir("pgbouncer")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Process: Process{dir: dir, grace: 10 * time.Second}, mode: mode}
	b.wipe = func() error { return nil }
	b.relaunch = func(ctx context.Context) error { return b.p.startReady(ctx, b.ready) }
	var list strings.Builder
	for _, u := range append([]string{"postgres"}, users...) {
		fmt.Fprintf(&list, "%q \"\"\n", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(list.String()), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	host, port, _ := strings.Cut(target, ":")
	err = onFreePort(ctx, func(listen int) (*proc, func(context.Context) error, error) {
		b.addr = hostPort(listen)
		ini := strings.Join([]string{
			"[databases]",
			fmt.Sprintf("* = host=%s port=%s", host, port),
			"[pgbouncer]",
			"listen_addr = 127.0.0.1",
			"listen_port = " + strconv.Itoa(listen),
			"unix_socket_dir =",
			"auth_type = trust",
			"auth_file = " + filepath.Join(dir, "userlist.txt"),
			"pool_mode = " + mode,
			"max_client_conn = 1000",
			"default_pool_size = 20",
			"admin_users = postgres",
			"ignore_startup_parameters = extra_float_digits",
		}, "\n") + "\n"
		path := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(path, []byte(ini), 0o600); err != nil {
			return nil, nil, err
		}
		if err := ownTree(dir, place.owner); err != nil {
			return nil, nil, err
		}
		b.p = place.proc("pgbouncer "+b.addr, bin, []string{path}, dir, filepath.Join(dir, "pgbouncer.log"))
		return b.p, b.ready, nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return b, nil
}

// ready is a real query through the pooler (to the server behind it).
func (b *PgBouncer) ready(ctx context.Context) error {
	c, err := pgx.Connect(ctx, b.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	var one int
	return c.QueryRow(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol).Scan(&one)
}
