"""Thread control shared by the experiments."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


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
