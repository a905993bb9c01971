# Set-up and the two everyday commands. Everything installs into .venv; nothing is needed by hand.
#
#   make train        install (once) and run a short default training
#   make test         install (once) and run the whole test suite, slow trainings included
#
# TORCH_SPEC picks the torch build. The default is the CPU build of 2.13.0; a GPU user passes a CUDA
# build, e.g. `make train TORCH_SPEC="torch==2.13.0"` with pip pointed at a CUDA index through
# PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, or simply TORCH_SPEC=torch on Linux, where PyPI's default wheel is CUDA.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TRAIN_ARGS ?= runner.max_iterations=50
PYTEST_ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup train test test-fast lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

train: setup
	$(BIN)/python tools/train.py $(TRAIN_ARGS)

test: setup
	$(BIN)/python -m pytest -m "slow or not slow" $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python tools/bench.py

clean:
	rm -rf $(VENV) logs outputs multirun
