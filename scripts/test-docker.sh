#!/usr/bin/env bash
# test-docker.sh: the container path's tests (make test-docker runs it under
# scripts/dockerd.sh, which provides the engine at $DOCKER_HOST and stops it after).
#
#  1. the image: scripts/images.sh builds it from Debian's packages (cached) and
#     imports it; its DLOCK_*_IMAGE variables point internal/servers and compose/ at it;
#  2. servers in containers through the docker command (DLOCK_SERVERS=docker, etcd included):
#     internal/servers' own tests (every kind, every fault method), the conformance
#     suite of every backend and the fault campaign of every backend (one trial per
#     scenario, no race detector: make test ran them both ways on local servers);
#  3. the compose stack: compose/docker-compose.yml brought up (host network,
#     127.0.0.1), the conformance suite of every backend against it through the
#     DLOCK_*_ADDRS variables (compose/env.sh), and `dlock check` on its Redlock
#     masters; brought down whatever happens;
#  4. no address outside the loopback range appeared on this machine, and no
#     network was created in the engine.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${DOCKER_HOST:?run me through scripts/dockerd.sh (make test-docker)}"
GO=${GO:-go}
TEST_FLAGS=${TEST_FLAGS:--race -count=1 -timeout 30m}
step() { printf '\n=== test-docker: %s (%ds so far)\n' "$*" "$(( $(date +%s) - start ))"; }
start=$(date +%s)
addrs() { ip -o addr show 2>/dev/null | awk '{ print $2, $4 }' | sort; }
before=$(addrs)

step "image"
eval "$(bash scripts/images.sh)"

step "servers in containers: internal/servers, the conformance suite and the fault campaign of every backend"
export DLOCK_SERVERS=docker
# shellcheck disable=SC2086
$GO test $TEST_FLAGS ./internal/servers/...
# The backends' suites here check that every server and every fault works through
# the engine; make test has just run the same tests under the race detector with 3
# trials per fault scenario on local servers (the report's figures come from those).
# So: no race detector, and one trial per scenario (more where a declaration asks).
DLOCK_FAULT_TRIALS=${DLOCK_FAULT_TRIALS:-1} $GO test -count=1 -timeout 30m -run 'TestConformance|TestFaults' \
	./backends/redislock/ ./backends/redlock/ ./backends/mysqllock/ ./backends/zklock/ ./backends/etcdlock/ ./backends/pglock/
unset DLOCK_SERVERS

step "compose stack"
compose=(docker-compose -f compose/docker-compose.yml -p dlock-ci)
down() { "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true; }
trap down EXIT
"${compose[@]}" up -d
# shellcheck source=../compose/env.sh
. compose/env.sh
# The shared servers of these tests are the compose ones (they wait until each answers).
# shellcheck disable=SC2086
$GO test $TEST_FLAGS -run '^TestConformance$' ./backends/redislock/ ./backends/mysqllock/ ./backends/zklock/ ./backends/etcdlock/
$GO run ./cmd/dlock check --url "redlock://$DLOCK_REDLOCK_ADDRS"
"${compose[@]}" ps
down
trap - EXIT

step "loopback only"
after=$(addrs)
if [ "$before" != "$after" ]; then
	echo "test-docker: the machine's addresses changed:" >&2
	diff <(echo "$before") <(echo "$after") >&2 || true
	exit 1
fi
nets=$(docker network ls --format '{{.Name}}' | sort | tr '\n' ' ')
if [ "$nets" != "host none " ]; then
	echo "test-docker: the engine has networks beyond host and none: $nets" >&2
	exit 1
fi
step "done"
