package servers

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// EnvServers chooses where servers come from: "local" (binaries on this machine
// only), "docker" (containers only), or "" / "auto" (the default: each kind from its
// local binary when installed, else from a container when a Docker engine answers).
const EnvServers = "DLOCK_SERVERS"

// The images servers run from in containers: the official image of each server,
// pinned to a version close to what Debian 12 ships (the local-binary path), each
// overridable by its environment variable. CI, which reaches no image registry,
// points all of them at an image it builds from Debian's packages
// (scripts/images.sh).
var (
	// RedisImage runs redis-server (and redis-cli for a cluster's creation). A
	// Debian-based image: the clock shim is a glibc shared object.
	RedisImage = Image{Env: "DLOCK_REDIS_IMAGE", Default: "redis:7.0.15"}
	// MariaDBImage runs mariadbd and mariadb-install-db.
	MariaDBImage = Image{Env: "DLOCK_MARIADB_IMAGE", Default: "mariadb:10.11.10"}
	// ZooKeeperImage runs java with ZooKeeperClassPath.
	ZooKeeperImage = Image{Env: "DLOCK_ZOOKEEPER_IMAGE", Default: "zookeeper:3.8.4"}
	// ZooKeeperClassPath is the class path inside ZooKeeperImage: the official
	// image keeps its configuration (logback.xml) in /conf and the jars in the
	// release's lib directory.
	ZooKeeperClassPath = Image{Env: "DLOCK_ZOOKEEPER_IMAGE_CLASSPATH", Default: "/conf:/apache-zookeeper-3.8.4-bin/lib/*"}
	// EtcdImage runs etcd (the etcd command line, /usr/local/bin/etcd), the
	// version of the go.etcd.io/etcd modules in lab/go.mod.
	EtcdImage = Image{Env: "DLOCK_ETCD_IMAGE", Default: "gcr.io/etcd-development/etcd:v3.7.3"}
	// PostgresImage runs PostgreSQL 15's programs from postgresBin (the official
	// image and Debian's postgresql-15 both keep them there) as its "postgres" user.
	PostgresImage = Image{Env: "DLOCK_POSTGRES_IMAGE", Default: "postgres:15.10"}
	// PgBouncerImage runs /usr/sbin/pgbouncer (Debian's package) as its "postgres"
	// user. There is no official image: without DLOCK_PGBOUNCER_IMAGE, PgBouncer
	// runs from the local binary only (StartPgBouncer under DLOCK_SERVERS=docker
	// returns a *NoImageError).
	PgBouncerImage = Image{Env: "DLOCK_PGBOUNCER_IMAGE"}
)

// containerUsers caches the ids of a user of an image (containerUser).
var containerUsers struct {
	mu  sync.Mutex
	ids map[[2]string]*syscall.Credential
}

// containerUser returns the uid and gid that user has in image (`id` run in a
// container of it): the owner to give the files a server running as that user
// keeps in its mounted directory.
func containerUser(image, user string) (*syscall.Credential, error) {
	containerUsers.mu.Lock()
	defer containerUsers.mu.Unlock()
	if c := containerUsers.ids[[2]string{image, user}]; c != nil {
		return c, nil
	}
	if err := ensureImage(image); err != nil {
		return nil, err
	}
	out, err := dockerCall("run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", `echo "$(id -u "$1") $(id -g "$1")"`, "sh", user)
	if err != nil {
		return nil, fmt.Errorf("servers: the %q user of %s: %w", user, image, err)
	}
	var uid, gid uint32
	if _, err := fmt.Sscanf(out, "%d %d", &uid, &gid); err != nil {
		return nil, fmt.Errorf("servers: the %q user of %s: id said %q", user, image, out)
	}
	if containerUsers.ids == nil {
		containerUsers.ids = map[[2]string]*syscall.Credential{}
	}
	c := &syscall.Credential{Uid: uid, Gid: gid}
	containerUsers.ids[[2]string{image, user}] = c
	return c, nil
}

// Image is one setting of the container path: a default and the environment
// variable that overrides it.
type Image struct {
	Env     string
	Default string
}

// Name is the value in force: $Env when set, else Default.
func (i Image) Name() string {
	if v := strings.TrimSpace(os.Getenv(i.Env)); v != "" {
		return v
	}
	return i.Default
}

// serverSource is where one server kind comes from for this process.
type serverSource int

const (
	fromLocal serverSource = iota
	fromDocker
)

// sourceFor decides where a server of one kind comes from: DLOCK_SERVERS, else
// the local binary when haveLocal says it is installed (its error is returned,
// a *MissingError, when neither the binary nor a Docker engine is there). An
// unknown DLOCK_SERVERS value, or "docker" without an engine, is an error that
// says so.
func sourceFor(what string, haveLocal func() error) (serverSource, error) {
	switch v := strings.TrimSpace(os.Getenv(EnvServers)); v {
	case "local":
		if err := haveLocal(); err != nil {
			return fromLocal, err
		}
		return fromLocal, nil
	case "docker":
		if err := dockerAvailable(); err != nil {
			return fromDocker, fmt.Errorf("servers: %s=docker, but %s cannot run in a container: %w", EnvServers, what, err)
		}
		return fromDocker, nil
	case "", "auto":
		err := haveLocal()
		if err == nil {
			return fromLocal, nil
		}
		if !IsMissing(err) {
			return fromLocal, err
		}
		if derr := dockerAvailable(); derr == nil {
			return fromDocker, nil
		} else {
			var m *MissingError
			errors.As(err, &m)
			return fromLocal, &MissingError{What: m.What, Install: m.Install + "; or start a Docker engine (" + derr.Error() + ")"}
		}
	default:
		return fromLocal, fmt.Errorf("servers: %s=%q: want local, docker or auto", EnvServers, v)
	}
}

// dockerOnly reports whether DLOCK_SERVERS=docker asks for containers only.
func dockerOnly() bool { return strings.TrimSpace(os.Getenv(EnvServers)) == "docker" }

// command resolves how one kind of server runs: the local binary that local finds,
// or name (the same command) inside image's container. A missing binary without
// an engine is local's *MissingError, with the Docker alternative added.
func command(name string, image Image, local func() (string, error)) (path, img string, err error) {
	src, err := sourceFor(name, func() error {
		p, err := local()
		path = p
		return err
	})
	if err != nil {
		return "", "", err
	}
	if src == fromDocker {
		return name, image.Name(), nil
	}
	return path, "", nil
}
