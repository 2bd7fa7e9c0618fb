# The two commands of the README are `make run` and `make test`; each installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SERVICES := $(PY) -m scripts.realservices
PHASE := scripts/phase.sh
# Reinstall when pyproject.toml changes; pip's cache (~/.cache/pip) keeps reinstalls quick.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=
# Two lanes side by side: the shared servers' tests, and the chaos tests (clusters of their own)
# followed by the unit tests (tests/conftest.py: _lane).
TEST_LANES ?= -n 2 --lanes

.PHONY: install run run-real test test-unit chaos lint types check services-up services-down services-status clean bench-peers

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

install:
	@$(PHASE) install $(MAKE) --no-print-directory $(STAMP)

## The platform on the embedded default (control plane on 127.0.0.1:8700).
run: install
	$(VENV)/bin/httpbus dev

## The platform on this machine's real ZooKeeper, Kafka, Pulsar and PostgreSQL (docs/running.md):
## starts them (make services-up), writes one deployment file for them, runs httpbus run on it.
run-real: services-up
	@mkdir -p .httpbus
	@test -s .httpbus/real.yaml || $(SERVICES) deployment > .httpbus/real.yaml
	@echo "deployment file .httpbus/real.yaml (its admin_token is the admin token)"
	$(VENV)/bin/httpbus run --config .httpbus/real.yaml

## What every commit must pass: ruff, ruff format --check and mypy strict first (seconds; a lint
## or type error fails here, before any server starts), then the whole suite against real
## ZooKeeper, Kafka and Pulsar, started and stopped here.
## Helm (the chart tests) and toxiproxy (latency and loss) are built once from Go modules into
## ~/.cache/httpbus (scripts/tools/helm.sh, scripts/tools/toxiproxy.sh). The 40 slowest tests are
## listed at the end: where the suite's time goes, from every CI run. The shared servers' tests
## run in one lane; the chaos tests, then the unit tests (niced), in the other; each lane one
## test at a time (TEST_LANES).
test: install
	@$(PHASE) ruff $(VENV)/bin/ruff check .
	@$(PHASE) format $(VENV)/bin/ruff format --check .
	@$(PHASE) mypy $(VENV)/bin/mypy
	@$(PHASE) tools sh -c 'scripts/tools/helm.sh >/dev/null && scripts/tools/toxiproxy.sh >/dev/null'
	@$(PHASE) chromium scripts/ensure-chromium.sh
	@$(PHASE) fetch $(SERVICES) fetch
	@$(PHASE) tests $(SERVICES) run -- $(PY) -m pytest $(TEST_LANES) --durations=40 $(PYTEST_ARGS)

## Unit tests only: no servers.
test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

## The faults of docs/reliability.md: leaders killed on a 3-node ZooKeeper ensemble and 3 Kafka
## brokers the tests start themselves (tests/chaos), real partitions of a worker, a producer or
## the leading control plane in a network namespace (tests/chaos/test_partitions.py,
## test_producer_partitioned.py, test_control_plane_partitioned.py; root), a Kafka broker
## partitioned from the other two, each broker in a namespace (test_broker_partitioned.py; root),
## ZooKeeper's leader split from its followers and a peer cut off, each peer in a namespace
## (test_zookeeper_partitioned.py; root), a rolling restart of ZooKeeper
## (test_rolling_restart.py), latency and cut connections between httpbus and
## each Kafka node, controller and ZooKeeper peer through toxiproxy (test_slow_network.py), and,
## on the single nodes, the zombie worker and an endpoint behind latency and lost connections
## (test_endpoint_toxic_real.py); each run judged by tests/chaos/checker.py (the endpoint's
## by its own order and neighbour checks). `make test` runs them too; this runs only them,
## with their figures printed and, at the end, a table of every run's verdict.
CHAOS_ALSO = tests/integration/test_zombie_worker_real.py tests/integration/test_endpoint_toxic_real.py
chaos: install
	$(SERVICES) --only zookeeper,kafka run -- $(PY) -m pytest -s tests/chaos $(CHAOS_ALSO) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

types: install
	$(VENV)/bin/mypy

## Kept for habit: `make test` runs lint and types itself.
check: test

## Publish beside two peers (bench/peers.py): Pulsar's REST produce on the running broker, and
## Allegro Hermes 0.11 on a Kafka 3.9 broker of its own (jars from Maven Central, started and
## stopped by scripts/realservices/hermes.py). Needs the servers of make services-up.
PEERS_ARGS ?= --seconds 10
bench-peers: install
	$(PY) -m scripts.realservices.hermes
	$(PY) bench/peers.py --hermes $(PEERS_ARGS)

services-up: install
	$(SERVICES) up

services-down:
	$(SERVICES) down

services-status:
	$(SERVICES) status

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
