# StreamingJob: a Kubernetes operator for checkpointed Spark Structured Streaming jobs on Kafka.
# `make run` runs the sample job on local Spark against the project's own Kafka broker;
# `make test` runs every test tier. Heavy downloads and builds are cached in $(STREAMJOB_CACHE).

SHELL := /bin/bash
.DEFAULT_GOAL := help
export STREAMJOB_CACHE ?= $(HOME)/.cache/streamingjob
# The checked-out tree, for commands run from it: the cached venv is shared by every clone and
# holds no project (tests get the tree from pytest's `pythonpath`; `pip install .` and the
# images install the package).
TREE = PYTHONPATH=$(CURDIR):$(CURDIR)/operator
VENV = $(shell bash scripts/venv.sh)
PY = $(VENV)/bin/python
PYTEST_ARGS ?=
RUN_BROKER_DIR := $(STREAMJOB_CACHE)/local-broker

.PHONY: help
help: ## Show the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: venv
venv: ## Create the cached Python environment (requirements/dev.txt, hash-locked)
	@echo $(VENV)

.PHONY: run
run: ## Run the sample StreamingJob on local Spark + a local Kafka broker (Ctrl-C stops)
	@$(TREE) bash scripts/run-local.sh "$(PY)"

.PHONY: run-avro
run-avro: ## The same with typed records: Avro values, a local schema registry, a dead-letter topic
	@$(TREE) bash scripts/run-local.sh "$(PY)" avro

.PHONY: run-sql
run-sql: ## The same with a SQL transform (spec.job.sql): a filter and a projection, no custom image
	@$(TREE) bash scripts/run-local.sh "$(PY)" sql

.PHONY: lint
lint: ## ruff lint + format check, mypy (strict on the pure modules), the import contracts, CRD compatibility with the last release
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(TREE) $(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/crd_compat.py

.PHONY: lock
lock: ## Rewrite the hash locks in requirements/ after a pin in pyproject.toml changed
	bash scripts/lock.sh

.PHONY: native
native: ## Build (once per source, cached) the source's native read path (Rust) into the venv
	@bash scripts/native.sh --install "$(VENV)" >/dev/null

.PHONY: native-check
native-check: ## The native crate's own checks: rustfmt, clippy, cargo test
	bash scripts/native.sh --check

.PHONY: bed-builds
bed-builds: ## Build (once, cached) the dev bed's own pieces: each broker version's jars, its one-JVM launcher and CDS archive, the Schema Registry, the Iceberg REST catalog, the local Spark's CDS archive
	@$(TREE) $(PY) -m devbed prepare

.PHONY: toolchain
toolchain: ## Build (once, cached) kube-apiserver, etcd, kubectl, MinIO and promtool from Go modules
	bash scripts/k8s-toolchain.sh apiserver >/dev/null
	bash scripts/k8s-toolchain.sh minio >/dev/null
	bash scripts/k8s-toolchain.sh promtool >/dev/null

.PHONY: helm
helm: ## Build (once, cached) helm from Go modules (chart tests)
	bash scripts/k8s-toolchain.sh helm >/dev/null

.PHONY: kind-node
kind-node: ## Build (once per recipe, cached) the kind bed's node image and its image registry: Kubernetes, CoreDNS and Distribution from Go modules
	@bash scripts/kind/docker-setup.sh >/dev/null
	@bash scripts/kind/node-image.sh >/dev/null
	@bash scripts/k8s-toolchain.sh registry >/dev/null

.PHONY: test-unit
test-unit: helm native ## Unit tests (seconds, no services)
	$(PY) -m pytest -m unit $(PYTEST_ARGS)

.PHONY: test-integration
test-integration: toolchain native ## Integration tests: real Kafka + Spark, real kube-apiserver + etcd
	$(PY) -m pytest -m integration $(PYTEST_ARGS)

.PHONY: simulate simulate-soak
SEEDS ?= 0-999
simulate: ## The deterministic simulation of the job protocol over a seed range (SEEDS=0-999): a shrunk story per violation, then "N histories, M steps, V violations"
	@$(TREE) $(PY) -m simulation $(SEEDS)

simulate-soak: ## The simulation's soak: 100x CI's steps (SEEDS=0-9999, hours on two cores)
	@$(TREE) $(PY) -m simulation 0-9999

.PHONY: test-soak
test-soak: toolchain native ## Cluster scenarios too load-sensitive for CI (an unclean leader election under readers)
	$(PY) -m pytest -m soak $(PYTEST_ARGS)

.PHONY: test-versions
test-versions: native ## The broker-version matrix: every engine and a driver kill on each supported Kafka version
	STREAMJOB_BROKER_MATRIX=full $(PY) -m pytest -m broker_versions $(PYTEST_ARGS)

.PHONY: prepare
# Two chains side by side, each step a no-op once cached: Python, Rust and JVMs (lint, the
# native crate, the dev bed's jars and archives), Go and docker (the toolchain, the bed's node image and registry). A fresh machine's
# builds keep both cores busy already (98 %), so this fills only their downloads and links:
# 19.2 -> 18.7 min (docs/ci.md). All of it before any test: the bed's builds get both cores
# instead of sharing them with the Spark tier while the e2e tier waits for the bed.
prepare: ## Lint and build everything the tests need (what `make test` does first)
	@$(MAKE) --no-print-directory lint native-check native bed-builds & rust=$$!; \
	$(MAKE) --no-print-directory toolchain helm kind-node; go=$$?; \
	wait $$rust && exit $$go

.PHONY: test
test: prepare ## Every test tier: unit, integration, then e2e on kind (what CI runs)
	@bash scripts/test-all.sh $(PY) $(PYTEST_ARGS)

.PHONY: images push
IMAGE_PREFIX ?= streamingjob
IMAGES ?=
images: ## Build the images (Spark, operator, Kafka, MinIO, the orders example) as $(IMAGE_PREFIX)/<name>:<version>
	STREAMJOB_IMAGE_PREFIX=$(IMAGE_PREFIX) bash images/build.sh

push: ## Build, then push the images to the registry IMAGE_PREFIX names (make push IMAGE_PREFIX=registry.example.com/team/streamingjob [IMAGES="spark orders"])
	STREAMJOB_IMAGE_PREFIX=$(IMAGE_PREFIX) bash images/push.sh $(IMAGES)

.PHONY: e2e
e2e: ## End-to-end tests on an offline kind cluster (node image + images cached)
	@kubeconfig=$$(bash scripts/kind/up.sh) || exit $$?; \
	STREAMJOB_E2E_KUBECONFIG=$$kubeconfig $(PY) -m pytest -m e2e $(PYTEST_ARGS); rc=$$?; \
	bash scripts/kind/down.sh; exit $$rc

.PHONY: demo demo-down
demo: toolchain helm ## The orders job on kind in one command (cluster, images, operator, Kafka, MinIO), then what to try
	$(TREE) $(PY) -m devbed.demo

demo-down: ## Delete the demo's kind cluster (the caches stay)
	$(TREE) $(PY) -m devbed.demo down

.PHONY: crd
crd: ## Regenerate crds/streamingjob.yaml from the models (a unit test checks for drift)
	$(TREE) $(PY) -m streamingjob_operator.api.crd > crds/streamingjob.yaml
	cp crds/streamingjob.yaml charts/streamingjob-operator/crds/streamingjob.yaml

.PHONY: bench
bench: toolchain native ## Benchmarks side by side; results in bench/results/, then their plots (make plots); BENCH_BASELINE=<dir with another spark_app> adds the Delta sink before/after
	$(TREE) $(PY) bench/source_bench.py
	$(TREE) $(PY) bench/decode_bench.py
	$(TREE) $(PY) bench/offsets_bench.py
	$(TREE) $(PY) bench/operator_bench.py
	$(TREE) $(PY) bench/table_sink_bench.py $(if $(BENCH_BASELINE),--baseline-code-root $(BENCH_BASELINE))
	$(TREE) $(PY) bench/kafka_sink_bench.py
	$(PY) bench/plot.py

.PHONY: bench-latency
bench-latency: toolchain native ## End-to-end latency beside Spark's Kafka source (about 20 min: bench/results/latency.json), a small batch's profile (latency-profile.json), the plots; LATENCY_ARGS=--quick: a 3-minute smoke check that writes nothing
	$(TREE) $(PY) bench/latency_bench.py $(LATENCY_ARGS)
	$(if $(LATENCY_ARGS),,$(TREE) $(PY) bench/latency_profile.py)
	$(PY) bench/plot.py

.PHONY: plots
plots: ## Redraw the figures of docs/benchmarks.md (docs/img/*.svg) from bench/results/*.json
	$(PY) bench/plot.py

.PHONY: docs
docs: ## Rewrite docs/modules.md, the module map, from every module's opening line (a unit test checks it)
	$(PY) scripts/module_map.py

.PHONY: clean
clean: ## Stop the local broker and remove local run data (the cache stays)
	-$(TREE) $(PY) -m devbed.kafka_broker stop --dir $(RUN_BROKER_DIR)
	-$(TREE) $(PY) -m devbed.schema_registry stop
	rm -rf /tmp/streamingjob
