#!/usr/bin/env bash
# without-servers.sh COMMAND [ARGS...]: runs COMMAND as on a machine without the
# servers' Debian packages, to show the container path takes over: in a private mount
# namespace (only COMMAND and its children see it; nothing is uninstalled, other
# processes keep every binary) the server binaries are covered by an empty,
# non-executable file and ZooKeeper's jars by an empty directory.
#
#   scripts/without-servers.sh scripts/dockerd.sh bash -c 'eval "$(bash scripts/images.sh)" && make test'
#
# Needs root (unshare, mount).
set -euo pipefail
if [ $# -eq 0 ]; then
	echo "usage: scripts/without-servers.sh COMMAND [ARGS...]" >&2
	exit 2
fi
holder=$(mktemp -d /tmp/dlock-hidden.XXXXXX)
trap 'rmdir "$holder" 2>/dev/null || true' EXIT
unshare --mount --propagation private bash -euo pipefail -c '
	holder=$1; shift
	# The empty file lives in a tmpfs of this namespace: nothing to clean up outside.
	mount -t tmpfs -o size=1m tmpfs "$holder"
	empty=$holder/empty
	: >"$empty"
	chmod 0644 "$empty"
	for b in redis-server redis-cli redis-sentinel mariadbd mysqld mariadb-install-db mysql_install_db java; do
		for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
			if [ -e "$d/$b" ]; then
				mount --bind "$empty" "$d/$b"
			fi
		done
	done
	for d in /usr/share/java /usr/share/zookeeper; do
		if [ -d "$d" ]; then
			mount -t tmpfs -o size=1m,mode=0755 tmpfs "$d"
		fi
	done
	left=
	for b in /usr/bin/redis-server /usr/sbin/mariadbd /usr/bin/java; do
		if [ -x "$b" ]; then left="$left $b"; fi
	done
	echo "without-servers.sh: still executable:${left:- none}; /usr/share/java holds $(ls /usr/share/java | wc -l) files" >&2
	"$@"
' without-servers "$holder" "$@"
