#!/usr/bin/env bash
# images.sh: makes the server image that CI runs its containers from, without any
# image registry, and prints the environment that points internal/servers and
# compose/ at it (eval "$(bash scripts/images.sh)").
#
#  1. a Debian root file system made with debootstrap (minbase, the host's suite and
#     apt sources, so the packages are the versions the host would install);
#  2. the server packages installed into it with apt-get in a chroot (redis-server,
#     mariadb-server, ZooKeeper's jars from libzookeeper-java — the zookeeper package
#     itself would bring a whole desktop JRE — and a headless JRE, postgresql-15 and
#     pgbouncer, which run as the image's "postgres" user), daemons kept from
#     starting, the packages' own databases (/var/lib/mysql, /var/lib/postgresql)
#     removed;
#  3. an etcd server built from go.etcd.io/etcd/server/v3 at the version lab/go.mod names
#     (Debian has no etcd server package here), static, as /usr/local/bin/etcd;
#  4. the tree packed as a tar in the cache directory, then `docker import`ed into
#     the engine at $DOCKER_HOST (no `docker build`, no network in the engine).
#
# The cache ($DLOCK_IMAGE_CACHE, default /var/cache/dlock-images, outside the
# checkout) keeps the tar under a key made of the build recipe (build() below and
# the package list), the candidate version of every package installed, the etcd
# version and the Go version: a run whose key is
# cached only imports. Delete the directory to rebuild.
#
# Needs root (debootstrap, chroot), debootstrap and docker (make deps-docker).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'images.sh: %s\n' "$*" >&2; }

PKGS=(redis-server mariadb-server libzookeeper-java libslf4j-java default-jre-headless postgresql-15 pgbouncer)
cache="${DLOCK_IMAGE_CACHE:-/var/cache/dlock-images}"
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2 }' lab/go.mod)
if [ -z "$etcd_version" ]; then
	log "lab/go.mod names no go.etcd.io/etcd/server/v3"
	exit 1
fi
for c in debootstrap docker go; do
	if ! command -v "$c" >/dev/null 2>&1; then
		log "$c not found (make deps-docker installs debootstrap and docker.io)"
		exit 1
	fi
done

# The key: what decides the image's content.
versions=$(apt-cache policy "${PKGS[@]}" | awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }')
if [ "$(printf '%s\n' "$versions" | grep -c .)" -ne ${#PKGS[@]} ] || printf '%s\n' "$versions" | grep -q '(none)'; then
	log "apt knows no candidate for every package (run apt-get update): $versions"
	exit 1
fi

build() {
	local t0 work root
	t0=$(date +%s)
	mkdir -p "$cache"
	work=$(mktemp -d "$cache/build.XXXXXX")
	root="$work/root"
	# Everything mounted below (proc in the chroot) stays inside this mount namespace
	# and goes away with it, also on failure.
	unshare --mount --propagation private bash -euo pipefail -c '
		root=$1 suite=$2; shift 2
		mirror=$(awk "/^URIs:/ { print \$2; exit } /^deb / { print \$2; exit }" /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -n1)
		mirror=${mirror:-http://deb.debian.org/debian}
		debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
			{ tail -n 30 "$root.debootstrap.log" >&2; exit 1; }
		# The same apt sources as the host: the same package versions.
		rm -f "$root/etc/apt/sources.list"
		cp -a /etc/apt/sources.list "$root/etc/apt/" 2>/dev/null || true
		mkdir -p "$root/etc/apt/sources.list.d"
		cp -a /etc/apt/sources.list.d/. "$root/etc/apt/sources.list.d/" 2>/dev/null || true
		printf "#!/bin/sh\nexit 101\n" >"$root/usr/sbin/policy-rc.d"
		chmod 755 "$root/usr/sbin/policy-rc.d"
		mount -t proc proc "$root/proc"
		chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get update -q >"$root.apt.log" 2>&1 ||
			{ tail -n 30 "$root.apt.log" >&2; exit 1; }
		chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$root.apt.log" 2>&1 ||
			{ tail -n 30 "$root.apt.log" >&2; exit 1; }
		chroot "$root" apt-get clean
		umount "$root/proc"
		rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* \
			"$root/usr/sbin/policy-rc.d" "$root"/var/log/*.log "$root"/var/lib/mysql/* "$root"/var/lib/postgresql/15
	' images "$root" "$suite" "${PKGS[@]}"
	log "root file system with ${PKGS[*]}: $(( $(date +%s) - t0 ))s"
	# etcd: the upstream module's own main package, with the dependency versions its
	# go.mod asks for, in a scratch module (the project's go.mod stays as it is).
	local mod="$work/etcd-build"
	mkdir -p "$mod"
	(
		cd "$mod"
		go mod init dlock.local/etcdbuild >/dev/null 2>&1
		go get "go.etcd.io/etcd/server/v3@$etcd_version" >/dev/null 2>&1
		CGO_ENABLED=0 go build -trimpath -o "$root/usr/local/bin/etcd" go.etcd.io/etcd/server/v3
	)
	log "etcd $etcd_version built: $(( $(date +%s) - t0 ))s"
	tar -C "$root" --numeric-owner -cf "$work/image.tar" .
	mv "$work/image.tar" "$tar"
	rm -rf "$work"
	log "built $tar ($(du -h "$tar" | cut -f1)) in $(( $(date +%s) - t0 ))s"
}

# The recipe is the build function and the package list: the environment printed at
# the end can change without a rebuild.
key=$(printf '%s\n' "$(declare -f build)" "${PKGS[*]}" "$suite" "$versions" "$etcd_version" "$(go env GOVERSION)" | sha256sum | cut -c1-12)
tar="$cache/servers-$key.tar"
image="dlock-ci/servers:$key"

if [ -f "$tar" ]; then
	log "cached: $tar"
else
	log "building the image for key $key (first run on this machine; later runs reuse it)"
	build
fi
# Old keys are of no use any more.
find "$cache" -maxdepth 1 -name 'servers-*.tar' ! -name "servers-$key.tar" -delete 2>/dev/null || true
find "$cache" -maxdepth 1 -name 'build.*' -mmin +120 -exec rm -rf {} + 2>/dev/null || true

if [ -n "${DOCKER_HOST:-}" ] || [ -S /var/run/docker.sock ]; then
	if docker image inspect "$image" >/dev/null 2>&1; then
		log "$image already in the engine"
	else
		t0=$(date +%s%N)
		docker import \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'ENV LANG=C.UTF-8' \
			"$tar" "$image" >/dev/null
		log "imported $image in $(( ($(date +%s%N) - t0) / 1000000 ))ms"
	fi
fi

cat <<EOF
export DLOCK_REDIS_IMAGE=$image
export DLOCK_MARIADB_IMAGE=$image
export DLOCK_ZOOKEEPER_IMAGE=$image
# Netty's codec, resolver and native-unix jars: the Netty connection factory (TLS)
# needs more of Netty than zookeeper.jar's manifest names, as on the local path.
export DLOCK_ZOOKEEPER_IMAGE_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar:/usr/share/java/netty-transport-native-unix-common.jar
export DLOCK_ETCD_IMAGE=$image
export DLOCK_POSTGRES_IMAGE=$image
export DLOCK_PGBOUNCER_IMAGE=$image
EOF
