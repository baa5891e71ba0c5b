"""Thread control shared by the experiments."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
S = TypeVar("S")


@contextlib.contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` torch intra-op threads, restoring the setting afterwards
    (``None`` or ``0``: leave it as it is).

    The experiments' tensors are small. On two shared cores a second OpenMP thread made
    ``torch.linalg.pinv`` of a 256 × 32 matrix about 100× slower (47 ms against 0.3 ms), and
    wall-clock comparisons in the papers are on "one CPU".
    """
    if not count:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def single_threaded(run: Callable[P, S]) -> Callable[P, S]:
    """Decorate a function (an experiment's ``run(config, progress)``) to run on one torch
    thread."""

    @functools.wraps(run)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> S:
        with torch_threads(1):
            return run(*args, **kwargs)

    return wrapped
