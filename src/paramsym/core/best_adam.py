"""Adam on free parameters that keeps the best point measured (used by
:func:`~paramsym.quantization.learned_rotation.learn_rotation` and
:func:`~paramsym.connectivity.learned_align.learn_alignment`).

Each step trains on one batch (cycling through the batches); every ``eval_every`` steps and at
the last step an objective over all the batches is measured, and the parameters of the lowest
measurement so far (the start included) are kept: the result never ends above its start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from paramsym.errors import NonFiniteError


@dataclass
class BestPoint:
    """What :func:`adam_keep_best` found.

    Attributes:
        value: the lowest measurement (the start's when nothing beat it).
        parameters: detached copies of the parameters at that measurement.
        before: the start's measurement.
        history: ``(step, measurement)`` pairs, step 0 the start.
    """

    value: float
    parameters: list[Tensor]
    before: float
    history: list[tuple[int, float]] = field(default_factory=list)


def adam_keep_best(
    parameters: Sequence[Tensor],
    loss: Callable[[Any], Tensor],
    measure: Callable[[], float],
    batches: Sequence[Any],
    *,
    steps: int,
    lr: float,
    eval_every: int,
    where: str,
    before: float | None = None,
) -> BestPoint:
    """Adam (learning rate ``lr``) on ``parameters`` for ``steps`` steps, keeping the best point.

    Args:
        parameters: leaf tensors with ``requires_grad`` (trained in place).
        loss: ``loss(batch) -> scalar`` at the parameters' current values; step ``t`` (1-based)
            trains on ``batches[(t - 1) % len(batches)]``.
        measure: the objective at the parameters' current values (called under
            ``torch.no_grad``), before the first step, every ``eval_every`` steps and after the
            last.
        batches: the training batches (not empty).
        steps, lr, eval_every: Adam's steps and learning rate; steps between measurements.
        where: names the loss in the error of a non-finite one (``"f: the loss"`` gives
            ``"f: the loss is nan at step 3"``).
        before: the start's measurement when the caller already has it (``measure()`` is not
            then called at the start).

    Returns:
        :class:`BestPoint`; ``parameters`` are left at the last step's values.

    Raises:
        NonFiniteError: a training loss is not finite (raised before its step is taken).
    """
    if before is None:
        with torch.no_grad():
            before = measure()
    best, best_parameters = before, [p.detach().clone() for p in parameters]
    history = [(0, before)]
    optimizer = torch.optim.Adam(parameters, lr=lr)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        value = loss(batches[(step - 1) % len(batches)])
        if not torch.isfinite(value):
            raise NonFiniteError(f"{where} is {float(value)} at step {step}")
        value.backward()
        optimizer.step()
        if step % eval_every == 0 or step == steps:
            with torch.no_grad():
                now = measure()
            history.append((step, now))
            if now < best:
                best, best_parameters = now, [p.detach().clone() for p in parameters]
    return BestPoint(best, best_parameters, before, history)
