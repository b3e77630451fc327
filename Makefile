# Sluice developer commands. `make help` lists them.
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= small
NODES ?=
PY_DIRS := operators tests e2e bench
CLUSTER_ARGS := --profile $(PROFILE) $(if $(NODES),--nodes $(NODES),)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= sluice-operators:$(VERSION)
CONTAINER_TOOL ?= $(firstword $(shell command -v docker podman buildah 2>/dev/null))
# BYO=1: act on the cluster named by $$KUBECONFIG instead of the local control plane.
BYO_ENV := $(if $(filter 1 true yes,$(BYO)),SLUICE_BYO_CLUSTER=1,)

.DEFAULT_GOAL := help

.PHONY: help
help:  ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PY) -m venv $(VENV)

.PHONY: setup
setup: $(BIN)/python  ## Install Python deps (locked) and build/cache the control-plane binaries
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==0.13.9
	# Byte code compiled once here: with PYTHONDONTWRITEBYTECODE set (as on these machines) every
	# operator start otherwise compiles numpy, aiohttp, pydantic and kopf again (~2 s of a core).
	$(BIN)/uv pip sync -q --compile-bytecode --python $(BIN)/python requirements/dev.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	$(BIN)/python -m compileall -q operators
	$(BIN)/python -m operators.devcluster build

.PHONY: lock
lock:  ## Re-resolve requirements/dev.lock (and runtime.lock, what the image installs) from pyproject.toml
	$(BIN)/uv pip compile -q pyproject.toml --extra dev --python-version 3.11 -o requirements/dev.lock
	$(BIN)/uv pip compile -q pyproject.toml --python-version 3.11 --generate-hashes -o requirements/runtime.lock

.PHONY: lint
lint:  ## ruff, mypy --strict, import-linter layers, CRD drift check
	$(BIN)/ruff check $(PY_DIRS)
	$(BIN)/ruff format --check $(PY_DIRS)
	$(BIN)/mypy $(PY_DIRS)
	$(BIN)/lint-imports
	$(BIN)/python -m operators.api.crdgen --check crds
	$(BIN)/python -m operators.install generate --check

.PHONY: fmt
fmt:  ## Apply ruff fixes and formatting
	$(BIN)/ruff check --fix $(PY_DIRS)
	$(BIN)/ruff format $(PY_DIRS)

.PHONY: crds
crds:  ## Regenerate crds/ from the models in operators/api (and the files generated from it)
	$(BIN)/python -m operators.api.crdgen crds
	$(BIN)/python -m operators.install generate

.PHONY: unit
unit:  ## Fast unit and property tests (no cluster)
	$(BIN)/pytest tests -q

.PHONY: e2e
# E2E_WORKERS=2: two pytest-xdist workers, each with a control plane of its own, one whole module
# at a time (a module's operators and stage stay in one worker). Serial (0) by default until a
# parallel run has been green on a quiet machine. Against your own cluster (BYO=1) the suite
# always runs serially: the modules would share that one cluster.
E2E_WORKERS ?= 0
E2E_PARALLEL := $(if $(filter 1 true yes,$(BYO)),,$(if $(filter-out 0,$(E2E_WORKERS)),-n $(E2E_WORKERS) --dist loadfile --no-loadscope-reorder,))
e2e:  ## End-to-end tests against a real local control plane (started by the tests) [BYO=1, E2E_WORKERS=2]
	$(BYO_ENV) $(BIN)/pytest e2e -q -m "not soak" $(E2E_PARALLEL)

.PHONY: test
test: lint unit e2e  ## Everything CI runs: lint + unit + e2e

.PHONY: bench
# Larger live sizes are opt-in, e.g. BENCH_LIVE_ARGS="--nodes 5000 --pods 50000 --pending 10000".
BENCH_LIVE_ARGS ?=
bench:  ## Benchmarks side by side (core; live cluster: bare loop, kube-scheduler, Sluice; admin operators; jobs operator); appends a dated report to docs/benchmarks.md
	$(BIN)/python -m bench.core
	$(BIN)/python -m bench.consolidation
	$(BIN)/python -m bench.live --write docs/benchmarks.md $(BENCH_LIVE_ARGS)
	$(BIN)/python -m bench.admin
	$(BIN)/python -m bench.jobs
	$(BIN)/python -m bench.events

.PHONY: soak
soak:  ## Long reliability runs (docs/reliability.md): events with 50 jobs / 30 s outage / SIGKILL, the 24-job fault test (the short one is in CI), fault rounds of 100 jobs, 100 jobs/s for 5 min (large profile), the API ceiling
	SLUICE_SOAK_EVENTS_JOBS=50 SLUICE_SOAK_OUTAGE_SECONDS=30 $(BIN)/pytest e2e/test_events.py -q -k many_jobs -o timeout=1200
	$(BIN)/pytest e2e -q -m soak --durations=0
	$(BIN)/python -m bench.soak --profile $(if $(filter small,$(PROFILE)),large,$(PROFILE))

.PHONY: quality
quality:  ## Placement quality vs published results (long: cached runs resume) -> docs/quality.md
	$(BIN)/python -m operators.simulator.quality run
	$(BIN)/python -m operators.simulator.quality lingjun
	$(BIN)/python -m operators.simulator.quality lingjun --compress 10
	$(BIN)/python -m operators.simulator.quality philly
	$(BIN)/python -m operators.simulator.quality report
	$(BIN)/python -m operators.simulator.consolidation

.PHONY: bench-core
bench-core:  ## Scheduler-core session benchmark (no cluster)
	$(BIN)/python -m bench.core

.PHONY: cluster-up
cluster-up:  ## Start the local cluster: make cluster-up PROFILE=small|large|lingjun [NODES=N]
	$(BIN)/python -m operators.devcluster up $(CLUSTER_ARGS)

.PHONY: cluster-down
cluster-down:  ## Stop the local cluster and remove its state [BYO=1: only what Sluice started]
	$(BYO_ENV) $(BIN)/python -m operators.install undeploy >/dev/null
	$(BYO_ENV) $(BIN)/python -m operators.devcluster down

.PHONY: nodes
nodes:  ## Create a profile's fake nodes (BYO=1: in your cluster, run by kwok there)
	$(BYO_ENV) $(BIN)/python -m operators.devcluster nodes $(CLUSTER_ARGS)

.PHONY: deploy
deploy:  ## Apply manifests/overlays/dev and run the operators as their ServiceAccounts [BYO=1]
	$(BYO_ENV) $(BIN)/python -m operators.install deploy

.PHONY: undeploy
undeploy:  ## Stop the operators `make deploy` started [BYO=1]
	$(BYO_ENV) $(BIN)/python -m operators.install undeploy

.PHONY: cluster-status
cluster-status:  ## Show the local cluster's processes and nodes
	$(BIN)/python -m operators.devcluster status

.PHONY: run
run:  ## Local cluster + CRDs + operators + samples [BYO=1: the cluster in $$KUBECONFIG]
	$(BYO_ENV) $(BIN)/python -m operators.devcluster run $(CLUSTER_ARGS)

.PHONY: image
image:  ## Build the operators image $(IMAGE) with docker, podman or buildah
	@test -n "$(CONTAINER_TOOL)" || { echo "make image: no docker, podman or buildah on PATH" \
	  "(tests/unit/install/test_image.py checks the Dockerfile without one)"; exit 1; }
	$(CONTAINER_TOOL) build -t $(IMAGE) .

.PHONY: clean
clean:  ## Remove the virtualenv and caches (keeps the built binaries in ~/.cache/sluice)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
