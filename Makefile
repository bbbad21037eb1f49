# dlock — make targets. `make test` is the test command CI runs (.ci/run).
# Two modules: the library and the user's dlock in the root, the lab (dlock-lab, the
# peers, the benchmarks, the etcd member binary) in lab/ (docs/architecture.md).
GO ?= go
TEST_FLAGS ?= -race -count=1 -timeout 20m
LAB = $(GO) run -C lab ./cmd/dlock-lab

.PHONY: all deps deps-docker test test-docker vet unit bench fuzz compare compare-full docs compose-config compose-up compose-down

all: test

# deps installs the server binaries the tests start (redis-server, mariadb, zookeeper,
# postgresql-15, pgbouncer, faketime, docker-compose) when apt-get is there, and says what to do elsewhere; then
# builds the etcd member binary (lab/cmd/dlock-etcd, cached in the user cache directory).
deps:
	bash scripts/deps.sh
	$(GO) run ./internal/servers/etcdbin

# deps-docker adds the container path's tools: docker.io (dockerd, containerd) and
# debootstrap (scripts/images.sh).
deps-docker:
	DLOCK_DEPS_DOCKER=1 bash scripts/deps.sh

vet:
	$(GO) vet ./...
	cd lab && $(GO) vet ./...

# test: go vet, then every test of both modules (the root's, then the lab's) under the
# race detector on real servers, then the ZooKeeper ensemble's leader kill without it
# (go-zookeeper itself races on reconnect; see backends/zklock TestFaults). ./... holds
# dlocktest's TestSimulation: its CI budget of seeded schedules (docs/testing.md).
test: deps vet
	$(GO) test $(TEST_FLAGS) ./...
	cd lab && $(GO) test $(TEST_FLAGS) ./...
	$(GO) test -count=1 -timeout 10m -run 'TestFaults/ensemble' ./backends/zklock/

# test-docker: the container path (what CI runs after make test): a private Docker
# engine (scripts/dockerd.sh: no bridge, no firewall rules, stopped at the end), CI's
# server image built from Debian's packages (scripts/images.sh, cached in
# /var/cache/dlock-images), then internal/servers' tests, the conformance suite and
# the fault campaign of every backend on servers in containers, and the conformance
# suite on the compose stack (scripts/test-docker.sh).
test-docker: deps-docker
	bash scripts/dockerd.sh bash scripts/test-docker.sh

# unit: the fast tests that need no server (the in-memory backend, dlocktest and its
# simulation's CI budget, and the suite itself).
unit:
	$(GO) test $(TEST_FLAGS) . ./driver/... ./conformance/... ./backends/memlock/... ./dlocktest/...

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd lab && $(GO) test -run '^$$' -bench . -benchmem ./...

# fuzz: every fuzz target of both modules (URL parsers, key encodings), one at a time on one core, for
# FUZZTIME each (default 10m; `make test` runs their corpora in testdata/fuzz as tests).
fuzz: deps
	bash scripts/fuzz.sh

# compare: the main job — the conformance suite, the fault campaign and the benchmarks of
# every backend and peer on real servers (the lab's dlock-lab compare); writes
# report/report.{json,md,html}. The quick campaign: every backend, peer and scenario
# with few trials. compare-full: the full campaign the committed reports come from
# (20 exercised trials a fault cell, benchmarks repeated).
compare: deps
	$(LAB) compare --out $(CURDIR)/report

compare-full: deps
	$(LAB) compare --full --out $(CURDIR)/report

# docs: render the documents' generated tables and figures from the committed report
# (the newest docs/results/*/report.json); `go run -C lab ./cmd/dlock-lab docs --check`
# lists disagreements instead.
docs:
	$(LAB) docs

compose-config:
	docker-compose -f compose/docker-compose.yml config -q

# compose-up/down: the servers of compose/ on this machine's Docker engine (compose v2,
# or docker-compose v1 where the plugin is missing); then `. compose/env.sh`.
COMPOSE = $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
compose-up:
	$(COMPOSE) -f compose/docker-compose.yml up -d

compose-down:
	$(COMPOSE) -f compose/docker-compose.yml down -v
