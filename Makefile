# dlock — make targets. `make test` is the test command CI runs (.ci/run).
GO ?= go
TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all deps deps-docker test test-docker vet unit bench compare docs compose-config compose-up compose-down

all: test

# deps installs the server binaries the tests start (redis-server, mariadb, zookeeper,
# faketime, docker-compose) when apt-get is there, and says what to do elsewhere.
deps:
	bash scripts/deps.sh

# deps-docker adds the container path's tools: docker.io (dockerd, containerd) and
# debootstrap (scripts/images.sh).
deps-docker:
	DLOCK_DEPS_DOCKER=1 bash scripts/deps.sh

vet:
	$(GO) vet ./...

# test: go vet, then every test under the race detector on real servers, then the
# ZooKeeper ensemble's leader kill without it (go-zookeeper itself races on reconnect;
# see backends/zklock TestFaults).
test: deps vet
	$(GO) test $(TEST_FLAGS) ./...
	$(GO) test -count=1 -timeout 10m -run 'TestFaults/ensemble' ./backends/zklock/

# test-docker: the container path (what CI runs after make test): a private Docker
# engine (scripts/dockerd.sh: no bridge, no firewall rules, stopped at the end), CI's
# server image built from Debian's packages (scripts/images.sh, cached in
# /var/cache/dlock-images), then internal/servers' tests, the conformance suite and
# the fault campaign of every backend on servers in containers, and the conformance
# suite on the compose stack (scripts/test-docker.sh).
test-docker: deps-docker
	bash scripts/dockerd.sh bash scripts/test-docker.sh

# unit: the fast tests that need no server (the in-memory backend and the suite itself).
unit:
	$(GO) test $(TEST_FLAGS) . ./driver/... ./conformance/... ./backends/memlock/...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

# compare: the main job — the conformance suite, the fault campaign and the benchmarks of
# every backend and peer on real servers; writes report/report.{json,md,html}.
compare: deps
	$(GO) run ./cmd/dlock compare --out report

# docs: render the documents' generated tables and figures from the committed report
# (the newest docs/results/*/report.json); `go run ./cmd/dlock docs --check` lists
# disagreements instead.
docs:
	$(GO) run ./cmd/dlock docs

compose-config:
	docker-compose -f compose/docker-compose.yml config -q

# compose-up/down: the servers of compose/ on this machine's Docker engine (compose v2,
# or docker-compose v1 where the plugin is missing); then `. compose/env.sh`.
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
compose-up:
	$(COMPOSE) -f compose/docker-compose.yml up -d

compose-down:
	$(COMPOSE) -f compose/docker-compose.yml down -v
