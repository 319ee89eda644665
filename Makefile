# Two entry points do all the set-up on a fresh machine: `make train` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU build of torch; installed before the package so that `torch>=2.4` resolves to it
# instead of pulling a multi-GB CUDA build.
TORCH ?= torch==2.13.0
export MUJOCO_GL ?= egl

.PHONY: setup train test lint format bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/python -m hns_train.train $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python bench/env_speed.py

clean:
	rm -rf $(VENV) .pytest_cache
