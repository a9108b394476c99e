# The targets are exactly what CI runs (.ci/run calls `make test`).
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin

.PHONY: up test lint typecheck bench schemas clean

# `make up` installs what running needs; `make test` (and lint, typecheck, bench) adds the
# dev tools (pytest, ruff, mypy, playwright, …). Each step says what it is doing, and pip
# shows each package it collects (not --quiet).
$(BIN)/turnstream: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "turnstream needs Python 3.11+"'
	@echo "==> [1/3] creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "==> [3/3] installing turnstream and what it needs to run"
	$(BIN)/pip install --progress-bar on -e .
	@echo "==> installed: $(BIN)/turnstream"
	@touch $@

DEV := $(VENV)/.dev-installed
$(DEV): $(BIN)/turnstream pyproject.toml
	@echo "==> installing the dev tools (tests, linters, type checker, browser driver)"
	$(BIN)/pip install --progress-bar on -e '.[dev]'
	@touch $@

## run the embedded nats-server and every service (Ctrl-C stops)
up: $(BIN)/turnstream
	@echo "==> starting: $(BIN)/turnstream up"
	$(BIN)/turnstream up

## lint, type-check, check the exported contract, run every test
test: lint typecheck $(DEV)
	$(BIN)/turnstream schemas export --check
	$(BIN)/pytest

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(DEV)
	$(BIN)/mypy

## every benchmark in bench/ with its defaults (the figures, and how each was run:
## docs/performance.md)
bench: $(DEV)
	$(BIN)/python bench/pure_core.py
	$(BIN)/python bench/append.py
	$(BIN)/python bench/consumers.py
	$(BIN)/python bench/turns.py
	$(BIN)/python bench/turn_timeline.py
	$(BIN)/python bench/provider.py
	$(BIN)/python bench/audit.py
	$(BIN)/python bench/recovery.py
	$(BIN)/python bench/resume.py
	$(BIN)/python bench/nats_client.py
	$(BIN)/python bench/http_face.py
	$(BIN)/python bench/mcp_tools.py
	$(BIN)/python bench/faults.py
	$(BIN)/python bench/cluster.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/telemetry.py
	$(BIN)/python bench/subturns.py
	$(BIN)/python bench/context_providers.py
	$(BIN)/python bench/llm_cost.py
	$(BIN)/python bench/decode.py
	$(BIN)/python bench/memory.py
	$(BIN)/python bench/burst.py
	$(BIN)/python bench/session_reads.py
	$(BIN)/python bench/sessions_list.py
	$(BIN)/python bench/cli_start.py

schemas: $(BIN)/turnstream
	$(BIN)/turnstream schemas export

clean:
	rm -rf $(VENV) .turnstream .pytest_cache .mypy_cache .ruff_cache
