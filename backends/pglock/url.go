package pglock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/backends/internal/tlsurl"
	"github.com/dlock-go/dlock/spec"
)

// URL schemes this package registers with dlock.Open.
const (
	// Scheme opens New:
	// postgres://user:password@host:port/database?table=dlock_locks&fifo=false.
	// The tables are created if absent (only then does the user need the CREATE
	// privilege on the schema). Every parameter, its bounds and its default:
	// docs/connecting.md.
	Scheme = "postgres"
	// SchemeLong is Scheme's other spelling, as libpq accepts it.
	SchemeLong = "postgresql"
	// AdvisoryScheme opens NewAdvisory:
	// postgres+advisory://user:password@host:port/database?session_timeout=30s&check_interval=1s.
	// session_timeout sets idle_session_timeout on every connection: how long the
	// server keeps the locks of a client that went silent.
	AdvisoryScheme = "postgres+advisory"
)

func init() {
	dlock.Register(dlock.Scheme{Name: Scheme, Open: openTable, Declare: declareTable, Inspect: inspectTable})
	dlock.Register(dlock.Scheme{Name: SchemeLong, Open: openTable, Declare: declareTable, Inspect: inspectTable})
	dlock.Register(dlock.Scheme{Name: AdvisoryScheme, Open: openAdvisory, Declare: declareAdvisory, Inspect: inspectAdvisory})
}

// The bounds of the URL parameters (docs/connecting.md).
const (
	defaultPort           = "5432"
	defaultConnectTimeout = 10 * time.Second
	minConnectTimeout     = 100 * time.Millisecond
	maxConnectTimeout     = time.Minute
	defaultTableConns     = 10
	maxURLConns           = 1000
	minSessionTimeout     = time.Second
	maxSessionTimeout     = 24 * time.Hour
	minCheckInterval      = 10 * time.Millisecond
	maxCheckInterval      = time.Hour
)

// The parameters every scheme takes, and each scheme's own.
var (
	commonParams   = tlsurl.With("sslmode", "connect_timeout", "max_conns")
	tableParams    = append([]string{"table", "fifo"}, commonParams...)
	advisoryParams = append([]string{"registry", "session_timeout", "check_interval"}, commonParams...)
)

// parsed is what a URL of either scheme says.
type parsed struct {
	cfg      *pgxpool.Config
	opts     []Option
	o        options
	session  time.Duration // advisory: idle_session_timeout (0: the server's)
	maxConns int
}

// parseURL reads u strictly: every parameter known and within its bounds (an
// error wrapping dlock.ErrInvalidURL that names it otherwise, never quoting a
// password), no PG* environment variable, no pgpass file.
func parseURL(u *url.URL, advisory bool) (*parsed, error) {
	known := tableParams
	if advisory {
		known = advisoryParams
	}
	q, err := dlock.ParseQuery(u, known...)
	if err != nil {
		return nil, err
	}
	p := &parsed{}
	var opts []Option
	if v, ok := q["table"]; ok {
		opts = append(opts, WithTable(v))
	}
	if v, ok := q["registry"]; ok {
		opts = append(opts, WithRegistry(v))
	}
	if _, ok := q["fifo"]; ok {
		on, err := q.Bool("fifo", false)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithFIFO(on))
	}
	timeout, err := q.Duration("connect_timeout", defaultConnectTimeout, minConnectTimeout, maxConnectTimeout)
	if err != nil {
		return nil, err
	}
	def := defaultTableConns
	if advisory {
		def = DefaultMaxConns
	}
	if p.maxConns, err = q.Int("max_conns", def, 1, maxURLConns); err != nil {
		return nil, err
	}
	if advisory {
		opts = append(opts, WithMaxConns(p.maxConns))
		if p.session, err = q.Duration("session_timeout", 0, minSessionTimeout, maxSessionTimeout); err != nil {
			return nil, err
		}
		check, err := q.Duration("check_interval", DefaultCheckInterval, minCheckInterval, maxCheckInterval)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithCheckInterval(check))
	}
	if p.o, err = newOptions(opts); err != nil {
		return nil, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	p.opts = opts
	if p.cfg, err = poolConfig(u, q, timeout); err != nil {
		return nil, err
	}
	p.cfg.MaxConns = int32(p.maxConns)
	if advisory && p.session > 0 {
		p.cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(p.session.Milliseconds(), 10)
	}
	return p, nil
}

// poolConfig turns user:password@host:port/database and the TLS parameters of q
// into a pool configuration.
func poolConfig(u *url.URL, q map[string]string, timeout time.Duration) (*pgxpool.Config, error) {
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %s:// needs a host: %s://user:password@host:port/database", dlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return nil, fmt.Errorf("%w: %s:// takes one host[:port], not a list", dlock.ErrInvalidURL, u.Scheme)
	}
	port := u.Port()
	if port == "" {
		port = defaultPort
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("%w: %s:// port %q: want 1 to 65535", dlock.ErrInvalidURL, u.Scheme, port)
	}
	if u.User == nil || u.User.Username() == "" {
		return nil, fmt.Errorf("%w: %s:// needs a user name: %s://user:password@host:port/database", dlock.ErrInvalidURL, u.Scheme, u.Scheme)
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") || len(db) > maxIdent || strings.ContainsRune(db, 0) {
		return nil, fmt.Errorf("%w: %s:// path %q: want one database name of at most %d bytes", dlock.ErrInvalidURL, u.Scheme, u.Path, maxIdent)
	}
	tc, err := tlsConfig(q)
	if err != nil {
		return nil, err
	}
	// A configuration with nothing from the environment: every field that could come
	// from PG* variables is set here.
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, fmt.Errorf("pglock: %w", err)
	}
	cc := cfg.ConnConfig
	cc.Host, cc.Database, cc.User = u.Hostname(), db, u.User.Username()
	p, _ := strconv.Atoi(port)
	cc.Port = uint16(p)
	cc.Password, _ = u.User.Password()
	cc.ConnectTimeout = timeout
	cc.Fallbacks = nil
	cc.RuntimeParams = map[string]string{"application_name": "dlock"}
	cc.KerberosSrvName, cc.KerberosSpn = "", ""
	cc.ValidateConnect, cc.AfterConnect = nil, nil
	if tc != nil && tc.ServerName == "" && !tc.InsecureSkipVerify {
		tc.ServerName = cc.Host
	}
	cc.TLSConfig = tc
	cfg.MinConns = 0
	return cfg, nil
}

// tlsConfig reads the TLS parameters (tlsurl's), and sslmode, libpq's spelling:
// disable (no TLS), require (TLS, no verification: tls=skip-verify), verify-ca (TLS,
// the certificate's chain verified, not its name), verify-full (tls=true). libpq's
// allow and prefer (TLS if the server offers it) are refused: a connection that
// silently stays in plain text is not what anyone asks for by URL. sslmode and tls
// together are refused.
func tlsConfig(q map[string]string) (*tls.Config, error) {
	mode, hasMode := q["sslmode"]
	if !hasMode {
		return tlsurl.Config(q, false)
	}
	if _, ok := q[tlsurl.ParamTLS]; ok {
		return nil, fmt.Errorf("%w: sslmode and tls say the same thing: give one of them", dlock.ErrInvalidURL)
	}
	q2 := make(map[string]string, len(q))
	for k, v := range q {
		q2[k] = v
	}
	switch mode {
	case "disable":
		q2[tlsurl.ParamTLS] = "false"
	case "require":
		q2[tlsurl.ParamTLS] = "skip-verify"
	case "verify-full", "verify-ca":
		q2[tlsurl.ParamTLS] = "true"
	default:
		return nil, fmt.Errorf("%w: sslmode=%q: want disable, require, verify-ca or verify-full", dlock.ErrInvalidURL, mode)
	}
	c, err := tlsurl.Config(q2, false)
	if err != nil || mode != "verify-ca" {
		return c, err
	}
	if _, ok := q[tlsurl.ParamServerName]; ok {
		return nil, fmt.Errorf("%w: sslmode=verify-ca does not check the server's name, so tls_server_name would be ignored: use verify-full", dlock.ErrInvalidURL)
	}
	// verify-ca: the chain against the roots, not the name.
	roots := c.RootCAs
	c.InsecureSkipVerify = true
	c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		certs := make([]*x509.Certificate, len(raw))
		for i, b := range raw {
			cert, err := x509.ParseCertificate(b)
			if err != nil {
				return err
			}
			certs[i] = cert
		}
		if len(certs) == 0 {
			return errors.New("the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, cert := range certs[1:] {
			opts.Intermediates.AddCert(cert)
		}
		_, err := certs[0].Verify(opts)
		return err
	}
	return c, nil
}

// maxTrialWait is the longest a silent holder's session may outlive it for the fault
// scenarios that wait for a second grant to be exercised (they wait a minute at most).
const maxTrialWait = 50 * time.Second

// keepaliveLoss is how long the server keeps the session of a client that vanished
// without closing its connection when no idle_session_timeout ends it: Linux's TCP
// keepalive (7200s idle, then 9 probes 75s apart).
const keepaliveLoss = 2*time.Hour + 9*75*time.Second

// declareTable: fencing (a per-key counter in the table), per-lease TTLs kept by
// the database clock, refresh, and with fifo=true a queue served in arrival order
// (FIFO). The rows survive a restart (a commit is on disk before it is
// acknowledged, with the server's defaults). Semaphores and read-write locks are
// native (a second table), fenced, without order or writer preference. Elections
// keep a row per term; a set of keys is one statement, each key with its token.
func declareTable(u *url.URL) (spec.Capabilities, error) {
	p, err := parseURL(u, false)
	if err != nil {
		return spec.Capabilities{}, err
	}
	return spec.Capabilities{Fencing: true, PerLeaseTTL: true, Refresh: true, MinTTL: MinTTL, FIFO: p.o.fifo,
		Semaphore: &spec.Primitive{Native: true, Fencing: true},
		RWLock:    &spec.Primitive{Native: true, Fencing: true, Weaknesses: []spec.Property{spec.WriterProgress}},
		Election:  &spec.Primitive{Native: true, Fencing: true},
		MultiKey:  &spec.Primitive{Native: true, Fencing: true}}, nil
}

// declareAdvisory: locks last as long as the session; the server keeps a silent
// client's session for session_timeout (idle_session_timeout), or until TCP
// keepalives give up when the URL does not set it; the server queues a key's
// waiters (FIFO). A holder learns that its session ended as the server closes its
// connection, not at its next check. Read-write locks are native (shared advisory
// locks; a waiting exclusive request keeps new shared ones out), without tokens;
// semaphores are the generic ones (slots of advisory locks: no fencing, limits not
// compared); sets of keys are taken key by key.
func declareAdvisory(u *url.URL) (spec.Capabilities, error) {
	p, err := parseURL(u, true)
	if err != nil {
		return spec.Capabilities{}, err
	}
	wait := p.session
	if wait == 0 {
		wait = keepaliveLoss
	}
	caps := spec.Capabilities{SessionTimeout: wait, FIFO: true,
		DeletionSeen: spec.SeenBySession, // the lock is the session's: deleting it is ending that
		Semaphore:    &spec.Primitive{Native: false, Weaknesses: []spec.Property{spec.SemaphoreConflict}},
		RWLock:       &spec.Primitive{Native: true, FIFO: true, WriterPreference: true, Weaknesses: []spec.Property{spec.RWConflict}},
		MultiKey:     &spec.Primitive{}}
	if wait > maxTrialWait {
		why := fmt.Sprintf("the server keeps a silent holder's session, and its lock, for %v (no idle_session_timeout; session_timeout sets it): no second client is granted within a trial", wait)
		caps.Inapplicable = map[spec.Scenario]string{spec.HolderPause: why, spec.Partition: why}
	}
	return caps, nil
}

func openTable(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	return open(ctx, u, false)
}

func openAdvisory(ctx context.Context, u *url.URL) (dlock.Locker, error) {
	return open(ctx, u, true)
}

// open opens the Locker of a postgres:// URL (advisory false) or a
// postgres+advisory:// one: its own pool, its tables made if missing. An advisory
// URL through a transaction pooler fails before the pool is made (ErrPooler).
func open(ctx context.Context, u *url.URL, advisory bool) (dlock.Locker, error) {
	p, err := parseURL(u, advisory)
	if err != nil {
		return nil, err
	}
	if advisory {
		if err := refuseEarly(ctx, p.cfg); err != nil {
			return nil, err
		}
	}
	pool, dials, info, err := connect(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	o := p.o
	o.ownPool, o.dials, o.pooler = true, dials, &info
	ensure, build := ensureTables, newTable
	if advisory {
		ensure, build = ensureRegistry, newAdvisory
	}
	if err := ensure(ctx, pool, o); err != nil {
		closePool(pool, dials)
		return nil, err
	}
	return build(pool, o), nil
}

// refuseEarly looks for a pooler before the pool is made, so that an advisory URL
// through one fails at Open with ErrPooler.
func refuseEarly(ctx context.Context, cfg *pgxpool.Config) error {
	info, err := findPooler(ctx, cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("pglock: connect to %s: %w", hostOf(cfg), err)
	}
	return refusePooler(info)
}

// connect looks for a pooler (behind one that moves clients between sessions,
// statements run unnamed: a statement prepared on one session is unknown to the
// next), opens a pool for cfg and checks that the server answers.
func connect(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, *dialTracker, poolerInfo, error) {
	info, err := findPooler(ctx, cfg.ConnConfig)
	if err != nil {
		return nil, nil, info, fmt.Errorf("pglock: connect to %s: %w", hostOf(cfg), err)
	}
	if info.present {
		// Behind any pooler, not only one the probe saw move a client: a transaction
		// pooler the probe took for a pinning one (a race under load) would hand a
		// statement prepared on one server session to the next.
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	dials := newDialTracker(cfg.ConnConfig.DialFunc)
	cfg.ConnConfig.DialFunc = dials.DialContext
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration > time.Second || unusable(p.Conn.PgConn())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, info, fmt.Errorf("%w: %w", dlock.ErrInvalidURL, err)
	}
	if err := pool.Ping(ctx); err != nil {
		dials.closeAll()
		pool.Close()
		return nil, nil, info, fmt.Errorf("pglock: connect to %s: %w", hostOf(cfg), err)
	}
	return pool, dials, info, nil
}

// closePool closes a pool the opener made, cutting its connections first (a hung
// store must not hold Close up: dialTracker).
func closePool(pool *pgxpool.Pool, dials *dialTracker) {
	dials.closeAll()
	pool.Close()
}

func hostOf(cfg *pgxpool.Config) string {
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// ensureTables creates the lock table and its companions unless the lock table
// (and, in the fair mode, the queue table) exists: tables an administrator created
// in advance need no CREATE privilege. A queue table without its since column (an
// older Migrate's, or none in the default mode) is migrated, best effort: where
// that is not allowed the fair mode needs no since, and the default mode runs
// without a queue (oldDefault).
func ensureTables(ctx context.Context, pool *pgxpool.Pool, o options) error {
	tables := []string{o.table, HoldersTable(o.table), ElectionsTable(o.table)}
	if o.fifo {
		tables = append(tables, QueueTable(o.table))
	}
	if err := ensure(ctx, pool, o, tables); err != nil {
		return err
	}
	var has bool
	if err := pool.QueryRow(ctx, hasSinceSQL, quoteIdent(QueueTable(o.table))).Scan(&has); err != nil {
		return fmt.Errorf("pglock: table %s: %w", quoteIdent(QueueTable(o.table)), err)
	}
	if !has {
		_ = Migrate(ctx, pool, optionsOf(o)...)
	}
	return nil
}

// ensureRegistry creates the key registry unless it exists.
func ensureRegistry(ctx context.Context, pool *pgxpool.Pool, o options) error {
	return ensure(ctx, pool, o, []string{o.registry})
}

func ensure(ctx context.Context, pool *pgxpool.Pool, o options, tables []string) error {
	for _, t := range tables {
		var found bool
		if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", quoteIdent(t)).Scan(&found); err != nil {
			return fmt.Errorf("pglock: table %s: %w", quoteIdent(t), err)
		}
		if !found {
			return Migrate(ctx, pool, optionsOf(o)...)
		}
	}
	return nil
}

// optionsOf turns o back into the Options that make it (for Migrate).
func optionsOf(o options) []Option {
	return []Option{WithTable(o.table), WithRegistry(o.registry), WithFIFO(o.fifo)}
}

// isDuplicateObject reports CREATE … IF NOT EXISTS (or ADD COLUMN IF NOT EXISTS)
// losing a race with another session creating the same object (the catalogs'
// unique index refuses the second).
func isDuplicateObject(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P07" || pe.Code == "42710" || pe.Code == "42701" || (pe.Code == "23505" && strings.HasPrefix(pe.ConstraintName, "pg_")))
}
