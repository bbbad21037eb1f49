#!/usr/bin/env bash
# dockerd.sh COMMAND [ARGS...]: runs COMMAND with a private Docker engine and stops the
# engine afterwards, also when COMMAND fails or this script is interrupted.
#
# The engine (Debian's docker.io: dockerd, which starts its own containerd) gets no
# network of its own and touches no firewall: no bridge, no iptables/ip6tables rules,
# no masquerading, no IP forwarding. Every container must therefore use host
# networking (internal/servers and compose/ bind every server to 127.0.0.1). Its data
# root, exec root, pid file and socket live in one temporary directory, removed at
# the end; COMMAND sees DOCKER_HOST pointing at the socket.
#
# With DLOCK_DOCKERD_KEEP=DIR the data root is DIR instead (kept between runs, so
# that images imported once stay): CI does not set it.
set -euo pipefail

log() { printf 'dockerd.sh: %s\n' "$*" >&2; }

if [ $# -eq 0 ]; then
	log "usage: scripts/dockerd.sh COMMAND [ARGS...]"
	exit 2
fi
if ! command -v dockerd >/dev/null 2>&1; then
	log "dockerd not found; install it: DLOCK_DEPS_DOCKER=1 bash scripts/deps.sh (or: make deps-docker)"
	exit 1
fi

# A short path: containerd's sockets live under the exec root, and a unix socket path
# has at most 107 bytes.
dir=$(mktemp -d /tmp/dlock-dockerd.XXXXXX)
data="${DLOCK_DOCKERD_KEEP:-$dir/data}"
mkdir -p "$data" "$dir/exec"
echo '{}' >"$dir/daemon.json"
pid=
stop() {
	local rc=$?
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		# SIGTERM: dockerd stops its containers (10s grace each, in parallel), then
		# containerd, then itself.
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "dockerd still running 30s after SIGTERM; killing it and its children"
			pkill -KILL -P "$pid" 2>/dev/null || true
			kill -KILL "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	fi
	# containerd-shim processes re-parent to init; a shim left by a killed engine
	# names this run's exec root on its command line.
	for p in $(pgrep -f -- "$dir/" 2>/dev/null || true); do
		kill -KILL "$p" 2>/dev/null || true
	done
	# Mounts (overlay layers, shm) the engine did not take down.
	awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$dir"
	exit "$rc"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sock="$dir/docker.sock"
dockerd \
	--bridge=none --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
	--userland-proxy=false \
	--config-file="$dir/daemon.json" \
	--data-root="$data" \
	--exec-root="$dir/exec" \
	--pidfile="$dir/dockerd.pid" \
	--host="unix://$sock" \
	--log-level=warn \
	>"$dir/dockerd.log" 2>&1 &
pid=$!

export DOCKER_HOST="unix://$sock"
t0=$(date +%s%N)
for _ in $(seq 1 300); do
	if [ -S "$sock" ] && docker version >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		log "dockerd exited during start-up:"
		tail -n 30 "$dir/dockerd.log" >&2
		exit 1
	fi
	sleep 0.1
done
if ! docker version >/dev/null 2>&1; then
	log "dockerd did not answer within 30s:"
	tail -n 30 "$dir/dockerd.log" >&2
	exit 1
fi
log "engine ready in $(( ($(date +%s%N) - t0) / 1000000 ))ms at $DOCKER_HOST (log $dir/dockerd.log)"
set +e
"$@"
rc=$?
set -e
if [ $rc -ne 0 ]; then
	log "the command failed ($rc); last lines of the engine's log:"
	tail -n 20 "$dir/dockerd.log" >&2
fi
exit $rc
