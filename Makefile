# hpcscope: the two commands of the README are `make demo` and `make test`.
# Everything a fresh machine needs is installed from here (Python venv, system packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
TORCH  := $(VENV)/.installed-torch
HTA    := .bench-venv/.installed-hta

.PHONY: demo test check lint typecheck imports unit venv system-deps torch bench bench-venv clean help schemas schemas-check

help:
	@echo "make demo   set up, then run the twin cluster + collector + web UI (prints URL and logins)"
	@echo "make test   set up everything the tests need, then lint, type-check and run the tests"
	@echo "make bench  run the benchmarks under bench/"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

venv: $(STAMP)

# PyPI's CPU wheel of torch 2.13.0 (taken from the local wheel directory where one exists).
$(TORCH): $(STAMP)
	$(BIN)/python -m pip install -q torch==2.13.0
	touch $@

torch: $(TORCH)

system-deps:
	scripts/install-system-deps.sh

demo: venv
	$(BIN)/hpcscope demo $(DEMO_ARGS)

lint: venv
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

# mypy --strict over src, tests, bench and scripts ([tool.mypy] files); the test ranks import torch.
typecheck: venv torch
	$(BIN)/mypy

imports: venv
	$(BIN)/lint-imports

check: lint typecheck imports schemas-check

# JSON Schema of every document the API and the CLI emit (docs/schemas/); a test fails on drift.
schemas: venv
	$(BIN)/python -m hpcscope.serve.schemas

schemas-check: venv
	$(BIN)/python -m hpcscope.serve.schemas --check

unit: venv
	$(BIN)/pytest -q

test: venv system-deps torch check
	$(BIN)/pytest -q

bench: venv torch bench-venv
	$(BIN)/pytest bench -q --benchmark-only || test $$? -eq 5
	.bench-venv/bin/python bench/traces_vs_hta.py tests/fixtures/traces/hta_df_index_resolver_1rank tests/fixtures/traces/param_dlrm_8rank/dlrm_kineto.tar.gz tests/fixtures/traces/hta_trace_filter_2rank

# HolisticTraceAnalysis 0.5.0 for bench/traces_vs_hta.py only (never a runtime or test dependency).
$(HTA): pyproject.toml
	test -x .bench-venv/bin/python || $(PYTHON) -m venv .bench-venv
	.bench-venv/bin/python -m pip install -q HolisticTraceAnalysis==0.5.0 -e .
	touch $@

bench-venv: $(HTA)

clean:
	rm -rf $(VENV) .bench-venv .mypy_cache .ruff_cache test-artifacts
