# hpcscope: the two commands of the README are `make demo` and `make test`.
# Everything a fresh machine needs is installed from here (Python venv, system packages).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
TORCH  := $(VENV)/.installed-torch
HTA    := .bench-venv/.installed-hta
TOOLS  := .tools-venv/.installed-tools
LOCK   := requirements/dev.lock

.PHONY: demo test check lint typecheck imports unit venv system-deps torch bench bench-venv clean help schemas schemas-check lock sbom audit tools screenshots

help:
	@echo "make demo   set up, then run the twin cluster + collector + web UI (prints URL and logins)"
	@echo "make test   set up everything the tests need, then lint, type-check and run the tests"
	@echo "make bench  run the benchmarks under bench/"
	@echo "make screenshots  retake the README's screenshots from the running demo (~4 min)"

# Every dependency from the hash-locked file (pip refuses a file whose hash differs), then
# hpcscope itself without resolving anything more; `make lock` rewrites the lock from
# pyproject.toml (tests/test_supply_chain.py fails when the two disagree).
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install -q --no-deps -e .
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

# The README's two screenshots (docs/img/), taken from the running demo in Chromium.
screenshots: venv
	$(BIN)/python scripts/readme_screenshots.py

lint: venv
	$(BIN)/ruff check src tests bench scripts fuzz
	$(BIN)/ruff format --check src tests bench scripts fuzz

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

# Three workers (pytest-xdist) on two cores: ~40 % of the suite's test time waits on real
# processes (servers starting, scrapes, the twin's real time), and a third worker uses it; tests
# that share a machine-wide resource are grouped on one worker (tests/support/xdist_groups.py);
# tests that measure real processes' timings (marker `serial`) run alone afterwards.
PYTEST_WORKERS ?= 3

test: venv system-deps torch check sbom
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not serial"
	$(BIN)/pytest -q -m serial

# Release tooling in its own venv (never a runtime or test dependency): pip-tools, pip-audit,
# cyclonedx-bom, pinned in requirements/tools.txt.
$(TOOLS): requirements/tools.txt
	test -x .tools-venv/bin/python || $(PYTHON) -m venv .tools-venv
	.tools-venv/bin/python -m pip install -q -r requirements/tools.txt
	touch $@

tools: $(TOOLS)

lock: $(TOOLS)
	.tools-venv/bin/pip-compile -q --allow-unsafe --extra=dev --generate-hashes --no-emit-find-links --no-emit-index-url --strip-extras --output-file=$(LOCK) pyproject.toml

# CycloneDX SBOM of the installed environment (torch included), validated against the schema.
sbom: venv torch $(TOOLS)
	mkdir -p test-artifacts
	.tools-venv/bin/cyclonedx-py environment --validate --output-reproducible --of JSON --mc-type application --pyproject pyproject.toml -o test-artifacts/sbom.cdx.json $(BIN)/python

# Known vulnerabilities of the locked versions and torch (PyPI's advisory data; needs pypi.org).
audit: $(TOOLS)
	.tools-venv/bin/pip-audit --progress-spinner off --vulnerability-service pypi --strict --require-hashes -r $(LOCK)

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
	rm -rf $(VENV) .bench-venv .tools-venv .mypy_cache .ruff_cache test-artifacts
