# hyperlaunch: two commands on a fresh Debian machine, as root.
#   make demo   set everything up and run the main job on a local multi-node Slurm cluster
#   make test   set everything up and run every test (unit + integration on a real cluster)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch first, from the CPU build: a bare `torch` requirement (the `train` extra) would pull a
# multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.hyperlaunch-installed

.PHONY: setup test unit integration demo golden clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[train,test]"
	touch $(STAMP)

# Tests marked solo (the real qwen3_0_6b) need most of the memory: they run after the rest, alone.
test: setup
	$(BIN)/python -m pytest -q -rs -n 3 --dist worksteal --durations=15 -m "not solo" tests/unit tests/integration
	$(BIN)/python -m pytest -q -rs --durations=5 -m solo tests/integration

unit: setup
	$(BIN)/python -m pytest -q tests/unit

integration: setup
	$(BIN)/python -m pytest -q -rs -n 3 --dist worksteal -m "not solo" tests/integration
	$(BIN)/python -m pytest -q -rs -m solo tests/integration

golden: setup
	UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/unit/test_render.py -k golden

demo: setup
	$(BIN)/python -m hyperlaunch.demo

clean:
	rm -rf $(VENV) build *.egg-info
