"""The ``closure`` argument of ``torch.optim.Optimizer.step``, shared by the optimizers here."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def evaluate_closure(closure: Callable[[], Tensor] | None) -> Tensor | None:
    """``closure()`` with gradients enabled (``step`` runs under ``no_grad``), or ``None``."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()
