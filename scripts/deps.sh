#!/usr/bin/env bash
# Installs the local server binaries used by internal/servers (tests, benchmarks,
# `dlock compare`). Idempotent: installs only what is missing.
#
# Debian/Ubuntu with apt-get: installs redis-server redis-tools mariadb-server
# zookeeper postgresql-15 pgbouncer faketime docker-compose gcc libc6-dev chromium
# libcurator-recipes-java (as root, or through sudo) and makes sure the
# distribution's own daemons are not left running: internal/servers starts its own
# servers on free loopback ports.
#
# With DLOCK_DEPS_DOCKER=1 (make deps-docker) it also installs the Docker path: docker.io
# (dockerd, containerd, runc: started only by scripts/dockerd.sh, never as a system
# service) and debootstrap (scripts/images.sh builds the CI's server images with it).
#
# Elsewhere: prints what to do instead (Docker: compose/ + DLOCK_*_ADDRS env vars).
set -euo pipefail

# gcc + libc6-dev build the tiny clock shim of internal/servers (libfaketime cannot run
# jemalloc-linked redis-server); faketime is kept for other binaries.
# chromium (headless) renders the HTML report of `dlock compare` in the cmd/dlock tests.
# libcurator-recipes-java (Apache Curator) runs beside dlock in backends/zklock's
# TestCuratorInterop: the two share a semaphore and a read-write lock.
# postgresql-15 (Debian 12's PostgreSQL; internal/servers runs its programs from
# /usr/lib/postgresql/15/bin as the "postgres" user the package creates) and pgbouncer
# (backends/pglock's pooler tests) have no container image: local binaries only.
PKGS=(redis-server redis-tools mariadb-server zookeeper postgresql-15 pgbouncer faketime docker-compose gcc libc6-dev chromium libcurator-recipes-java)
SERVICES=(redis-server mariadb mysql zookeeper postgresql pgbouncer)
if [ "${DLOCK_DEPS_DOCKER:-}" = 1 ]; then
	PKGS+=(docker.io debootstrap)
fi

log() { printf 'deps: %s\n' "$*" >&2; }

if ! command -v apt-get >/dev/null 2>&1; then
	cat >&2 <<'MSG'
deps: apt-get not found; install the servers by hand, or use Docker:
  - local binaries wanted on PATH: redis-server, redis-cli, mariadbd + mariadb-install-db,
    java + ZooKeeper jars (ZOOKEEPER_CLASSPATH), libfaketime (FAKETIME_LIB),
    PostgreSQL 15 (initdb, postgres, pg_basebackup) and pgbouncer (no container image)
  - or run a Docker engine: the tests then start every missing server in a container
    from its official image (through the docker command; see compose/README.md)
  - or: docker compose -f compose/docker-compose.yml up -d
    and export the addresses listed in compose/README.md (DLOCK_REDIS_ADDRS, DLOCK_MYSQL_DSN,
    DLOCK_ZK_ADDRS, DLOCK_ETCD_ADDRS)
  etcd needs the Go toolchain only: its member binary is built from lab/ (make deps).
MSG
	exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		log "not root and no sudo; run as root: apt-get install -y --no-install-recommends ${PKGS[*]}"
		exit 1
	fi
fi

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

stop_services() {
	for s in "${SERVICES[@]}"; do
		if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
			"${SUDO[@]}" systemctl stop "$s" >/dev/null 2>&1 || true
			"${SUDO[@]}" systemctl disable "$s" >/dev/null 2>&1 || true
		fi
		if [ -x "/etc/init.d/$s" ]; then
			"${SUDO[@]}" "/etc/init.d/$s" stop >/dev/null 2>&1 || true
		fi
	done
}

if [ ${#missing[@]} -eq 0 ]; then
	log "all packages present: ${PKGS[*]}"
	stop_services
	exit 0
fi

log "installing: ${missing[*]}"
# Keep Debian's maintainer scripts from starting the system daemons during install.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
	"${SUDO[@]}" chmod 755 "$policy"
	added_policy=1
fi
cleanup() { if [ "$added_policy" = 1 ]; then "${SUDO[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
stop_services
log "done"
