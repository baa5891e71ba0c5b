# paramsym: `make test` sets up .venv (once) and runs the test suite; see README.md.
PYTHON        ?= python3
VENV          := .venv
BIN           := $(VENV)/bin
# The tested PyTorch. On the reference machine, pip installs this CPU build from a local wheel;
# an unpinned `torch` would pull the newest CUDA build (several GB). Every install below uses
# the constraints file, so no dependency (e.g. a benchmark peer) can move torch.
TORCH_VERSION := 2.13.0
CONSTRAINTS   := $(VENV)/constraints.txt
# --no-compile: pip's byte-compilation of every installed file (torch's thousands) was about half
# of the set-up time; Python compiles the modules a run imports, once, on first import.
PIP           := $(BIN)/python -m pip install --disable-pip-version-check --no-compile \
                 -c $(CONSTRAINTS)
# The neural-tangents benchmark peer (benchmarks/nt_peer.py) runs in its own venv: neural-tangents
# 0.6.5 does not import with current JAX, and its pins (numpy<2, an old TensorFlow) would clash
# with the main venv. neural-tangents itself goes in with --no-deps, as its metadata asks for
# unpinned jax/tensorflow that would pull incompatible newest releases.
NT_VENV       := .venv-nt
NT_PIP        := $(NT_VENV)/bin/python -m pip install --disable-pip-version-check
# The benchmark peers (the bench extra of pyproject.toml) go into .venv by name, not as
# `.[bench]`: curvlinops-for-pytorch depends on backpack-for-pytorch, which requires torchvision
# but imports it only in backpack.utils.examples (an MNIST loader). The torchvision wheels pip
# finds do not load with the pinned CPU torch ("operator torchvision::nms does not exist"), and
# an installed torchvision that fails to load breaks transformers' model classes, which the tests
# import. So those two go in with --no-deps, their other runtime dependencies by name (pip's
# resolver pulls torchvision back for them even when they are already installed). Keep these
# lists in step with the bench extra. A torchvision that does not load (left by an earlier
# `make bench`) is removed.
BENCH_PEERS   := "pyhessian>=0.1" "rebasin==0.0.47"
BENCH_NO_DEPS := "curvlinops-for-pytorch>=2.0" "backpack-for-pytorch>=1.6"
BENCH_DEPS    := "einops>=0.3,<1" "einconv>=0.1" "unfoldNd>=0.2,<1" "linear_operator>=0.2" \
                 "opt-einsum>=3.4" "tqdm>=4"

.PHONY: test chromium demo tour bench bench-nt-env lint typecheck docs wheel clean

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
	$(PIP) $(BENCH_PEERS) $(BENCH_DEPS)
	$(PIP) --no-deps $(BENCH_NO_DEPS)
	$(BIN)/python -c "import torchvision" 2>/dev/null || $(BIN)/python -m pip uninstall -y -q torchvision
	$(BIN)/python -c "import curvlinops, pyhessian, rebasin, torch_pruning, paramsym; \
		from transformers import BertModel, GPT2Model"
	touch $@

# tests/test_report_html.py renders runs/index.html in headless Chromium (Debian's package).
chromium:
	command -v chromium || (apt-get update && apt-get install -y chromium)

test: $(VENV)/.dev chromium
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
	$(BIN)/python benchmarks/bench_detect.py --out benchmarks/results/detect.json
	$(BIN)/python benchmarks/bench_equivariance.py --out benchmarks/results/equivariance.json
	$(BIN)/python benchmarks/bench_discovery.py --out benchmarks/results/discovery.json
	$(BIN)/python benchmarks/bench_real_size.py --out benchmarks/results/real_size.json
	$(BIN)/python benchmarks/bench_audit.py --out benchmarks/results/audit.json

$(NT_VENV)/.installed:
	test -x $(NT_VENV)/bin/python || $(PYTHON) -m venv $(NT_VENV)
	$(NT_PIP) "numpy<2" jax==0.4.23 jaxlib==0.4.23 "ml_dtypes<0.5" frozendict \
		tensorflow-cpu==2.15.1 tf2jax==0.3.5
	$(NT_PIP) --no-deps neural-tangents==0.6.5
	$(NT_VENV)/bin/python -c "import neural_tangents"
	touch $@

bench-nt-env: $(NT_VENV)/.installed

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples docs
	$(BIN)/ruff format --check src tests benchmarks examples docs/*.py

typecheck: $(VENV)/.dev
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/): warnings are errors; the result is in site/.
docs: $(VENV)/.dev
	$(BIN)/python -m mkdocs build --strict

# The sdist and the wheel, in dist/ (built with the venv's setuptools: no network, no isolation).
wheel: $(VENV)/.dev
	rm -f dist/paramsym-*
	$(BIN)/python -m build --no-isolation --outdir dist .

clean:
	rm -rf $(VENV) $(NT_VENV) build dist site src/*.egg-info .pytest_cache .hypothesis
