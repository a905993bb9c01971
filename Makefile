# Set-up and the two everyday commands. Everything installs into .venv; nothing is needed by hand.
#
#   make train        install (once) and run a short default training
#   make test         install (once) and run the whole test suite, slow trainings included
#
# TORCH_SPEC picks the torch build and is installed before the project, so the project's own torch range is then
# already met and pip never swaps one build for another. The default takes a local CPU wheel of 2.13.0 where pip's
# find-links provide one (CI); a GPU user passes e.g. TORCH_SPEC=torch (PyPI's Linux wheel is the CUDA build) or
# points pip at a CUDA wheel index through PIP_INDEX_URL / PIP_EXTRA_INDEX_URL.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
TRAIN_ARGS ?= runner.max_iterations=60 task.max_episode_steps=200
PYTEST_ARGS ?=
# The suite runs in TEST_WORKERS processes (pytest-xdist), a test file's tests in one process (its module fixtures
# built once). Most tests are single-threaded trainings and subprocesses: two processes on two cores nearly halve the
# wall time. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

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
	$(BIN)/python -m pytest -m "slow or not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python tools/bench.py

clean:
	rm -rf $(VENV) logs outputs multirun
