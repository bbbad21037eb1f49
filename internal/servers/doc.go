// Package servers starts real servers for tests, benchmarks and the CLI:
// Redis (single, independent masters, master+replica, cluster), MariaDB,
// PostgreSQL (single, primary+streaming replica) and PgBouncer, ZooKeeper
// (standalone, ensemble), etcd (single or cluster), and an in-process TCP proxy
// for network faults. Tests use it through the
// servertest sub-package, which adds t.Cleanup and the skip-or-fail policy.
//
// # Where servers come from
//
// Shared single servers (SharedRedis, SharedMySQL, SharedPostgres,
// SharedZooKeeper, SharedEtcd) use, in order: an address from the environment
// (DLOCK_REDIS_ADDRS — the first of the comma list, DLOCK_MYSQL_DSN,
// DLOCK_POSTGRES_URL, DLOCK_ZK_ADDRS, DLOCK_ETCD_ADDRS), waited for until it answers; else a server
// started on first use, like the private, faultable ones (Start*), from one of
// two places:
//
//   - a local binary (redis-server; mariadbd + mariadb-install-db; Debian's
//     PostgreSQL 15 in /usr/lib/postgresql/15/bin — initdb, postgres,
//     pg_basebackup — run as the "postgres" user when this process is root, since
//     PostgreSQL refuses to run as root; pgbouncer, likewise; java with
//     Debian's /usr/share/java/zookeeper.jar, or $ZOOKEEPER_CLASSPATH /
//     $ZOOKEEPER_HOME; for etcd the member binary of the lab module,
//     lab/cmd/dlock-etcd, built from this checkout on first use and cached, or
//     $DLOCK_ETCD_BIN — etcdbin.go: etcd's server is no dependency of this module);
//   - a container of the server's image, started through the docker command
//     (docker.go): the same command line, ports and temporary directory (mounted
//     at its own path), on the host's network, bound to 127.0.0.1, as this
//     process's user. Images (images.go): the official image of each server,
//     pinned, each overridable (DLOCK_REDIS_IMAGE, DLOCK_MARIADB_IMAGE,
//     DLOCK_ZOOKEEPER_IMAGE with DLOCK_ZOOKEEPER_IMAGE_CLASSPATH,
//     DLOCK_ETCD_IMAGE).
//
// DLOCK_SERVERS chooses: "local" (binaries only), "docker" (containers only; a
// server about to start as a local process is then an error), or "auto" / unset:
// each kind from its binary when installed, else from a container when a Docker
// engine answers. The same
// handles and fault methods serve both ways: Kill is a SIGKILL of the process
// group or `docker kill`, Pause a SIGSTOP or `docker pause` (the cgroup freezer),
// Restart a new process or a new container on the same directory and ports,
// and shifted clocks (below) load the same shim, mounted into the container.
// Containers are removed as soon as they exit; those of a test binary that was
// killed are removed by the next one (they carry their owner's host and pid).
// RedisMastersFromEnv (DLOCK_REDLOCK_ADDRS) lets Redlock tests run against
// external masters. compose/docker-compose.yml brings up the same images for the
// environment variables (see compose/README.md).
//
// A missing binary (without a Docker engine) yields a *MissingError (IsMissing)
// holding the install command; servertest skips on it unless
// DLOCK_REQUIRE_SERVERS=1.
// PostgreSQL runs in containers as its image's "postgres" user (it refuses root),
// whose ids own its directory. PgBouncer has no official image: without
// DLOCK_PGBOUNCER_IMAGE, under DLOCK_SERVERS=docker StartPgBouncer returns a
// *NoImageError (IsNoImage), on which servertest skips, DLOCK_REQUIRE_SERVERS or
// not.
// scripts/deps.sh (make deps) installs everything on Debian/Ubuntu.
//
// # Processes
//
// Every server runs in its own temporary directory on free 127.0.0.1 ports,
// Redis without persistence unless RedisOptions.AOF is set. Children get their
// own process group and SIGKILL when the test binary dies (Pdeathsig), so
// nothing outlives a panic or a test time-out. Server output goes to a log file
// in the temporary directory (LogPath); its tail is included in start-up
// errors. Readiness is a real request (PING, a MySQL ping, ZooKeeper `srvr`,
// etcd's Status), polled every 15ms until the context's deadline
// (DefaultStartTimeout when it has none).
//
// Every server handle (*Redis, *MySQL, *ZooKeeper, *Etcd) embeds one Process, the
// handle of its process or container:
//
//	Stop() error                                    // SIGTERM, wait (SIGKILL after a grace period)
//	Kill() error                                    // SIGKILL the process group, wait
//	Restart(ctx context.Context, keepData bool) error // same ports; stops first if running
//	Pause() error; Resume() error                   // SIGSTOP / SIGCONT
//	Close() error                                   // kill + remove temp dir; idempotent
//	Running() bool; LogPath() string; External() bool
//
// Fault methods on external servers return ErrExternal.
//
// # API
//
//	StartRedis(ctx, RedisOptions{AOF, FakeTimeOffset, Args, TLS, Password}) (*Redis, error)
//	StartRedisMasters(ctx, n) ([]*Redis, error)
//	StartRedisSentinelGroup(ctx, replicas, sentinels) (*RedisSentinelGroup, error) // MasterName, Master, Replicas, Sentinels, SentinelAddrs(), MasterAddr(ctx), WaitFailover(ctx, old)
//	StartRedisReplicaPair(ctx) (master, replica *Redis, err error)
//	    replica: PauseReplication(), ResumeReplication(ctx), WaitInSync(ctx), Promote(ctx), Master(), Link()
//	StartRedisCluster(ctx, masters) (*RedisCluster, error)   // Nodes, Addrs(), WaitOK(ctx), Close()
//	(*Redis).Do(ctx, args...) (string, error)                 // control commands, no client library
//	(*Redis).ShiftClock(ctx, "+60s") error; (*Redis).ClockOffset(ctx) (time.Duration, error)
//
//	StartMySQL(ctx) (*MySQL, error); StartMySQLWith(ctx, MySQLOptions{TLS, Args})
//	(*MySQL).NewDatabase(ctx) (dsn string, err error); DSN(db) string; DropDatabase(ctx, nameOrDSN) error
//
//	StartPostgres(ctx, PostgresOptions{TLS, HBA, Settings}) (*Postgres, error) // Addr(), URL(db), Exec(ctx, db, stmts...), NewDatabase(ctx), DropDatabase(ctx, name)
//	StartPostgresReplicaPair(ctx, sync) (primary, replica *Postgres, err error)
//	    replica: PauseReplication(ctx), ResumeReplication(ctx), WaitInSync(ctx), Promote(ctx), Link()
//	StartPgBouncer(ctx, target, mode, users...) (*PgBouncer, error) // Addr(), URL(db), Mode()
//
//	StartZooKeeper(ctx) (*ZooKeeper, error)                   // Addrs(), Mode(ctx), FourLetter(ctx, cmd)
//	StartZooKeeperWith(ctx, ZooKeeperOptions{TLS})            // the client port speaks TLS only (Netty)
//	StartZooKeeperEnsemble(ctx, n) (*ZKEnsemble, error)       // Nodes, Addrs(), Leader(ctx), KillLeader(ctx), Close()
//
//	StartEtcd(ctx) (*Etcd, error)                             // a member process: Endpoints(), Name()
//	StartEtcdWith(ctx, EtcdOptions{TLS})                      // (*Etcd).Admin(), EnableAuth(ctx, rootPassword)
//	StartEtcdCluster(ctx, n) (*EtcdCluster, error)            // Members, Endpoints(), Leader(ctx), KillLeader(ctx), Close()
//	EtcdBinary() (string, error)                              // the member binary (built and cached on first use)
//
//	NewPKI() (*PKI, error)                                    // a throw-away CA: CAFile, Server*, Client*, ClientTLS(), URLQuery()
//	NewPKIFor(hosts ...string) (*PKI, error)                  // the same, its server certificate for exactly hosts
//
//	NewProxy(target) (*Proxy, error)                          // Addr(), Cut(), Blackhole(), Stall(), Hold(match), LoseReply(match), Restore(), Close()
//
//	SharedRedis(ctx), SharedMySQL(ctx), SharedPostgres(ctx), SharedZooKeeper(ctx), SharedEtcd(ctx); Shutdown()
//
// Leader and KillLeader wait (bounded by ctx) until the cluster agrees on one
// leader; KillLeader returns the member it killed (SIGKILL of its process).
//
// # Test helpers (package servertest)
//
//	Main(m *testing.M)                      // from TestMain: run, Shutdown, fail on leaked child processes or containers
//	Redis(t) *Redis; MySQL(t) *MySQL; ZooKeeper(t) *ZooKeeper; Etcd(t) *Etcd   // shared, do not fault
//	MySQLDSN(t) string; NewDatabase(t, *MySQL) string                           // fresh database, dropped at cleanup
//	Postgres(t); NewPostgres(t, PostgresOptions); PostgresDatabase(t, *Postgres) string
//	PostgresReplicaPair(t, sync) (primary, replica); PgBouncer(t, target, mode, users...)
//	NewRedis(t, RedisOptions); NewMySQL(t, MySQLOptions); NewZooKeeper(t, ZooKeeperOptions); NewEtcd(t, EtcdOptions) // private
//	RedisMasters(t, n); RedisReplicaPair(t) (m, r); RedisCluster(t, n); RedisSentinelGroup(t, replicas, sentinels)
//	SecureRedis(t, pki, admin, user, password, rules); PKI(t)
//	Open(t, url) dlock.Locker; Findings(t, url) map[string]spec.Finding   // dlock.Open and dlock.Inspect for tests
//	ZKEnsemble(t, n); EtcdCluster(t, n); Proxy(t, target)
//	LeaderKills(kill) func(testing.TB)      // a conformance.LeaderKiller fault: restart the last victim, kill the leader
//
// Temporary directories carry the owner's pid; directories whose owner died
// (a SIGKILLed test binary) are removed by the next run.
//
// # Shifted clocks
//
// RedisOptions.FakeTimeOffset runs redis-server with a shifted wall clock and
// (*Redis).ShiftClock moves it while the server runs (visible within ~10ms;
// ShiftClock returns once the server's TIME shows it). The shift is an
// LD_PRELOAD shim (csrc/clockshim.c, compiled once with cc and cached in the
// user cache directory) because libfaketime deadlocks in processes using
// jemalloc, as Debian's redis-server does (wolfcw/libfaketime#130). Without a C
// compiler, libfaketime is used for binaries that do not link jemalloc. A Redis
// in a container loads the shim too (mounted read-only), which needs the engine
// on this machine's kernel: RedisClockShiftable says when it is not, and the
// fault harnesses then report the clock scenarios not applicable with that reason
// (conformance.FaultLimiter).
//
// # Proxy modes
//
// Cut closes every connection and closes new ones at once (errors, fast).
// Blackhole keeps connections open and drops every byte (time-outs; the bytes
// are lost). Stall holds bytes back without dropping them (a lagging link;
// Restore delivers them). Hold(match) stalls only the requests that contain match
// (a key name: one lock's requests stall, the others' go through). LoseReply(match)
// lets the next request containing match reach the server and closes its connection
// when the reply comes back, undelivered (a reply lost after the command ran).
// Restore returns to forwarding.
package servers
