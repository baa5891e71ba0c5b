# paramsym: `make test` sets up .venv (once) and runs the test suite; see README.md.
PYTHON        ?= python3
VENV          := .venv
BIN           := $(VENV)/bin
# The tested PyTorch. On the reference machine, pip installs this CPU build from a local wheel;
# an unpinned `torch` would pull the newest CUDA build (several GB). Every install below uses
# the constraints file, so no dependency (e.g. a benchmark peer) can move torch.
TORCH_VERSION := 2.13.0
CONSTRAINTS   := $(VENV)/constraints.txt
PIP           := $(BIN)/python -m pip install --disable-pip-version-check -c $(CONSTRAINTS)

.PHONY: test demo tour bench lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(CONSTRAINTS): Makefile | $(BIN)/python
	echo "torch==$(TORCH_VERSION)" > $@

$(VENV)/.torch: $(CONSTRAINTS)
	$(PIP) "torch==$(TORCH_VERSION)"
	touch $@

$(VENV)/.dev: $(VENV)/.torch pyproject.toml
	$(PIP) -e ".[dev]"
	touch $@

$(VENV)/.bench: $(VENV)/.dev
	$(PIP) -e ".[dev,bench]"
	touch $@

test: $(VENV)/.dev
	$(BIN)/python -m pytest

demo: $(VENV)/.dev
	$(BIN)/paramsym reproduce --preset quick

tour: $(VENV)/.dev
	$(BIN)/python examples/tour.py

bench: $(VENV)/.bench
	$(BIN)/python benchmarks/bench_curvature.py --out benchmarks/results/curvature.json

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(VENV)/.dev
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
