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
# The neural-tangents benchmark peer (benchmarks/nt_peer.py) runs in its own venv: neural-tangents
# 0.6.5 does not import with current JAX, and its pins (numpy<2, an old TensorFlow) would clash
# with the main venv. neural-tangents itself goes in with --no-deps, as its metadata asks for
# unpinned jax/tensorflow that would pull incompatible newest releases.
NT_VENV       := .venv-nt
NT_PIP        := $(NT_VENV)/bin/python -m pip install --disable-pip-version-check

.PHONY: test demo tour bench bench-nt-env lint typecheck clean

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

bench: $(VENV)/.bench $(NT_VENV)/.installed
	$(BIN)/python benchmarks/bench_curvature.py --out benchmarks/results/curvature.json
	$(BIN)/python benchmarks/bench_ntk.py --out benchmarks/results/ntk.json
	$(BIN)/python benchmarks/bench_teleport.py --out benchmarks/results/teleport.json
	$(BIN)/python benchmarks/bench_connectivity.py --out benchmarks/results/connectivity.json
	$(BIN)/python benchmarks/bench_symo.py --out benchmarks/results/symo.json

$(NT_VENV)/.installed:
	test -x $(NT_VENV)/bin/python || $(PYTHON) -m venv $(NT_VENV)
	$(NT_PIP) "numpy<2" jax==0.4.23 jaxlib==0.4.23 "ml_dtypes<0.5" frozendict \
		tensorflow-cpu==2.15.1 tf2jax==0.3.5
	$(NT_PIP) --no-deps neural-tangents==0.6.5
	$(NT_VENV)/bin/python -c "import neural_tangents"
	touch $@

bench-nt-env: $(NT_VENV)/.installed

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(VENV)/.dev
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(NT_VENV) build src/*.egg-info .pytest_cache .hypothesis
