# Two entry points do all the set-up on a fresh machine: `make train` installs the package and
# what training needs; `make test` adds the test extra (Ray, TorchRL, Warp, RLlib's
# dependencies, pytest, ruff) to the same environment.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# torch is installed before the package so that `torch>=2.4` resolves to it. Without an NVIDIA
# driver (no working `nvidia-smi`) it comes from PyTorch's CPU wheel index instead of the
# multi-GB CUDA build on PyPI; override with `make TORCH_INDEX=URL`, or `TORCH_INDEX=` for pip's
# own index. A torch wheel that pip finds without an index (pip's find-links) is used first.
TORCH ?= torch==2.13.0
NVIDIA_DRIVER := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
TORCH_INDEX ?= $(if $(NVIDIA_DRIVER),,https://download.pytorch.org/whl/cpu)
export MUJOCO_GL ?= egl

.PHONY: setup setup-test train test lint format bench gpu-day browser clean

setup: $(STAMP)

setup-test: $(TEST_STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	if $(BIN)/pip install -q --no-deps --no-index "$(TORCH)" 2>/dev/null; \
	then $(BIN)/pip install -q "$(TORCH)"; \
	else $(BIN)/pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)); fi
	$(BIN)/pip install -q -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/pip install -q -e ".[test]"
	touch $(TEST_STAMP)

train: $(STAMP)
	$(BIN)/python -m hns_train.train $(ARGS)

# Two pytest workers (pytest-xdist): many tests wait on worker processes that start, connect
# and stop, and the other worker's test fills those waits. The tests of one file stay on one
# worker, in order (tests/conftest.py). The slowest tests are printed at the end of every run,
# to keep the suite's time in view.
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?= -n $(PYTEST_WORKERS) --dist loadfile --durations=30

# Then the numerical tests (marked `numerics`) again with the AVX2 code paths forced
# (tests/code_paths.py): float32 results differ in their last bits between AVX-512 and AVX2
# machines, CI gets either, and a machine of one kind so checks the other's paths as well.
NUMERICS_ARGS ?= -n $(PYTEST_WORKERS) --dist loadfile -m numerics

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)
	$(BIN)/python tests/code_paths.py avx2 $(BIN)/python -m pytest -q $(NUMERICS_ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(TEST_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Chromium from the system's packages for the html replay's screenshot test (CI runs this
# first); where it cannot be installed (not root, no apt-get) that test is skipped.
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } || \
		echo "chromium could not be installed: the screenshot test will be skipped"; \
	else echo "chromium missing and not installable here: the screenshot test will be skipped"; fi

bench: $(STAMP)
	$(BIN)/python bench/env_speed.py

# Every GPU figure within DEADLINE seconds (default 480; bench/gpu_day.sh for PARTS, DEVICE,
# REPORT_DIR, FULL): with this checkout's venv when there is one, else with $(PY) and the packages
# on PYTHONPATH (the offline kit installed into a folder). Nothing is installed.
GPU_DAY_PY = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
.PHONY: offline-kit
gpu-day:
	PY=$(GPU_DAY_PY) bash bench/gpu_day.sh

# The offline kit (bench/offline_kit.py): the project's wheels for a GPU node without internet,
# in parts, with part-1/install.sh. Needs pip and the network here. A device call carries the
# checkout's tree and one part, together at most KIT_CALL_MB MiB: each part's size is printed
# next to the tree's, and a part that would not fit is refused. KIT_CUDA_ONLY=1 (the node's kit)
# also leaves out what the node's image has (KIT_NODE_PACKAGES, default bench/node_packages.txt;
# `none` carries everything) unless the project needs another version.
#   make offline-kit PYTHON_VERSION=3.12 KIT_CUDA_ONLY=1 KIT_NO_EXTRAS=1
PYTHON_VERSION ?=
KIT ?= dist/offline-kit
KIT_SKIP ?= torch
KIT_CALL_MB ?= 56
KIT_PART_MB ?=
KIT_NODE_PACKAGES ?=
KIT_CUDA_ONLY ?=
KIT_NO_EXTRAS ?=
offline-kit:
	$(GPU_DAY_PY) bench/offline_kit.py --out "$(KIT)" --skip "$(KIT_SKIP)" \
		--call-mb $(KIT_CALL_MB) $(if $(KIT_PART_MB),--part-mb $(KIT_PART_MB)) \
		$(if $(KIT_NODE_PACKAGES),--node-packages "$(KIT_NODE_PACKAGES)") \
		$(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION)) \
		$(if $(filter 1,$(KIT_CUDA_ONLY)),--cuda-only) $(if $(filter 1,$(KIT_NO_EXTRAS)),--no-extras)

clean:
	rm -rf $(VENV) .pytest_cache
