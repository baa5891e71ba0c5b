"""Shared fixtures and the hypothesis profiles."""

from __future__ import annotations

import os
from typing import Any

# torch's OpenMP threads spin-wait by default. When other jobs share the cores, that makes small
# linear-algebra calls 10-100x slower (eigh of 140 x 140: 3 ms -> 0.1-0.4 s). Set before torch
# is imported, which starts the OpenMP runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# `make test` runs one pytest-xdist worker per core: one torch thread each (and in the
# subprocesses they start), as two threads per worker would oversubscribe the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch
from hypothesis import HealthCheck, settings

# CI runs derandomised (reproducible); set HYPOTHESIS_PROFILE=explore locally to search wider.
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (restored afterwards): small systems on shared cores
    are 10-100x slower with a second OpenMP thread (see paramsym.experiments.threads). Use it
    with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def once_per_session(request: pytest.FixtureRequest, key: str, compute: Any) -> Any:
    """``compute()``, run once per test session even across pytest-xdist workers: the first
    worker to ask computes it under a file lock and pickles it into the session's shared
    temporary directory, the others load it (pytest-xdist's documented pattern for a
    session-wide fixture). Without xdist, ``compute()`` itself."""
    import pickle

    from filelock import FileLock

    worker = getattr(request.config, "workerinput", None)
    if worker is None:
        return compute()
    shared = request.getfixturevalue("tmp_path_factory").getbasetemp().parent
    path = shared / f"{key}.pickle"
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value


# The longest tests first (measured on the reference machine: 20-75 s each, against under 10 s
# for nearly all others), so that no long test starts near the end and the two xdist workers
# finish together; whole modules where a module-scoped fixture is shared. Stable: the order
# within each group is pytest's.
_LONG_FIRST = (
    "[fd-bivariate]",
    "test_learned_teleport_experiment.py",
    "test_teleport_generalization_experiment.py",
    "[fd-univariate]",
    "[fd-weight-decay]",
    "test_ray_backend_matches_local",
    "test_docs.py",
    "test_wheel.py",
    "test_make_demo_reproduces_every_library_experiment",
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    def rank(item: Any) -> int:
        return next(
            (i for i, part in enumerate(_LONG_FIRST) if part in item.nodeid), len(_LONG_FIRST)
        )

    items.sort(key=rank)
