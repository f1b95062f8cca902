# quiver — `make help` lists the targets. The two that matter on a fresh machine:
#   make demo   build, then run SQL over a generated Parquet and CSV file
#   make test   install what the tests need, then run every suite
SHELL := /bin/bash
.DEFAULT_GOAL := help

# One shared target directory outside the clone, so a fresh clone (and CI) reuses the build.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/quiver/target
# Tests, the CLI, the demo and the Python extension share this profile: nothing builds twice.
PROFILE ?= ci
CARGO ?= cargo
QUIVER := $(CARGO_TARGET_DIR)/$(PROFILE)/quiver
DEMO_DIR := $(CURDIR)/target-demo
# The Python package: a virtualenv in the clone, the extension copied next to python/quiver.
VENV := $(CURDIR)/.venv
PYTHON := $(VENV)/bin/python
EXTENSION := $(CARGO_TARGET_DIR)/$(PROFILE)/libquiver_python.so

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the quiver CLI (profile $(PROFILE))
	$(CARGO) build --profile $(PROFILE) --workspace

.PHONY: bench-build
bench-build: ## Build the CLI with fat LTO for benchmarks (profile dist; benchmarks/ prefer it)
	$(CARGO) build --profile dist --workspace --bins

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv with what the Python tests and the demo need

$(VENV)/.installed: python/requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r python/requirements-dev.txt
	touch $@

.PHONY: python
python: build ## Build the extension and put it into python/quiver (an in-place install)
	cp $(EXTENSION) python/quiver/_quiver.abi3.so

.PHONY: demo
demo: venv python ## Build, then run SQL over a pandas DataFrame joined with a Parquet file
	@mkdir -p $(DEMO_DIR)
	cd $(DEMO_DIR) && PYTHONPATH=$(CURDIR)/python $(PYTHON) $(CURDIR)/examples/demo.py

.PHONY: demo-cli
demo-cli: build ## The same join from the CLI, over a generated Parquet and CSV file
	@mkdir -p $(DEMO_DIR)
	@$(QUIVER) -q "COPY (SELECT number AS id, 'user_' || (number % 7) AS name, \
	    CAST(number * 37 % 1000 AS DOUBLE) / 10 AS amount, \
	    DATE '2026-01-01' + CAST(number % 90 AS INT) AS day \
	    FROM generate_series(1, 100000) AS t(number)) TO '$(DEMO_DIR)/orders.parquet'; \
	  COPY (SELECT * FROM (VALUES ('user_0', 'Paris'), ('user_1', 'Berlin'), ('user_2', 'Rome'), \
	    ('user_3', 'Madrid'), ('user_4', 'Lisbon'), ('user_5', 'Vienna'), ('user_6', 'Oslo')) \
	    AS c(name, city)) TO '$(DEMO_DIR)/customers.csv' (FORMAT csv, HEADER true)"
	@$(QUIVER) -f Pretty --time -q "SELECT c.City, count(*) AS Orders, round(sum(o.Amount), 2) AS Revenue \
	    FROM '$(DEMO_DIR)/orders.parquet' o JOIN '$(DEMO_DIR)/customers.csv' c USING (name) \
	    GROUP BY c.City ORDER BY Revenue DESC"

.PHONY: fmt
fmt: ## Format the Rust code
	$(CARGO) fmt --all

.PHONY: fmt-check
fmt-check: ## Check formatting
	$(CARGO) fmt --all -- --check

.PHONY: clippy
clippy: ## Lint every crate, warnings as errors
	$(CARGO) clippy --profile $(PROFILE) --workspace --all-targets -- -D warnings

.PHONY: postgres
postgres: ## Install PostgreSQL (Debian's package) if no initdb is found; the scanner's tests start a private server
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  echo "installing postgresql for the Postgres scanner tests"; \
	  $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -qq postgresql; \
	else echo "PostgreSQL not found and no apt-get: install it (the Postgres tests fail under CI=true)"; fi

.PHONY: test-rust
# Not --all-targets: it would build the targets marked `test = false` as empty test binaries,
# each linking all of DataFusion.
test-rust: postgres ## Rust unit tests, CLI tests and the .slt golden files
	$(CARGO) test --profile $(PROFILE) --workspace

.PHONY: slt
slt: ## Only the .slt golden files (FILTER=name to pick some)
	$(CARGO) test --profile $(PROFILE) --workspace --test sqllogictests -- $(FILTER)

.PHONY: slt-complete
slt-complete: ## Rewrite the .slt expected results from quiver's output (review the diff!)
	$(CARGO) test --profile $(PROFILE) --workspace --test sqllogictests -- $(FILTER) --complete

.PHONY: test-python
# `postgres`: the TPC-H tests load the standard DDL into a private server of their own.
test-python: venv python postgres ## The Python package's pytest suites (with a fixed-seed slice of the fuzzer)
	PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q python/tests

.PHONY: fuzz
fuzz: venv python ## Random queries against DuckDB, TLP and NoREC, new seeds for FUZZ_SECONDS (default 600); failures as .slt cases in FUZZ_OUT
	PYTHONPATH=$(CURDIR)/python:$(CURDIR)/python/tests $(PYTHON) -m sqlfuzz --seconds $(or $(FUZZ_SECONDS),600) \
	    --seed $(or $(SEED),$$(date +%s)) --out $(or $(FUZZ_OUT),$(CURDIR)/target-fuzz)

.PHONY: tpch-full
tpch-full: venv python postgres ## TPC-H's 22 queries at SF 0.01, 0.1 and 1 over every source, quiver's optimizations on and off
	QUIVER_TPCH_FULL=1 PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q python/tests/test_tpch.py

.PHONY: lint-python
lint-python: venv ## ruff: lint and format check of the Python code
	$(VENV)/bin/ruff check python benchmarks examples
	$(VENV)/bin/ruff format --check python benchmarks examples

.PHONY: test
test: fmt-check test-rust clippy test-python lint-python ## Everything CI runs: format checks, all suites, lints

.PHONY: clean
clean: ## Remove build outputs and demo files
	$(CARGO) clean
	rm -rf $(DEMO_DIR) $(VENV) python/quiver/_quiver.abi3.so target-fuzz
