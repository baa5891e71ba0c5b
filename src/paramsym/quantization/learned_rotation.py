"""Rotations learned on the quantized model's loss (SpinQuant, Liu et al. 2024; notes 005 §7).

A random rotation spreads outliers but is not the best one: SpinQuant trains the stream's (and
the heads') rotations on the loss of the fake-quantized model, the rounding passed through by the
straight-through estimator. :func:`learn_rotation` does that on every rotation group
:func:`~paramsym.quantization.rotate` uses: each group's element is

    Q = Q₀ (I − A)⁻¹ (I + A),     A = S − Sᵀ,

the Cayley transform of a skew-symmetric A (SpinQuant's Cayley parameterisation) after a start
Q₀ (a randomized Hadamard matrix by default, as SpinQuant starts), with S a free square matrix
trained by Adam on the quantized loss (:func:`~paramsym.quantization.quantized_call` with
``ste=True``) of the training batches. Q is orthogonal for every S to float precision (the
Cayley transform of a skew matrix is; the tests check 1e-10 in float64), so the rotated model
computes the folded model's function exactly, whatever the training did. The quantized loss
over all the batches is measured before, every ``eval_every`` steps and at the end, and the best
rotations are kept: the learned rotation never ends above its start.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from paramsym.core.best_adam import adam_keep_best
from paramsym.core.params import output_change
from paramsym.errors import InvalidArgumentError
from paramsym.quantization.quantizer import Quantizer
from paramsym.quantization.rotation import (
    ROTATIONS,
    RotationResult,
    act_all,
    orthogonality,
    prepared,
    random_rotation,
    transform_report,
)
from paramsym.quantization.simulate import quantized_call

LossFn = Callable[[Any, Any], Tensor]


@dataclass(frozen=True)
class LearnedRotationConfig:
    """Settings of :func:`learn_rotation`.

    Attributes:
        steps: Adam steps (one batch each, cycling through the batches).
        lr: Adam's learning rate on the free matrices S.
        eval_every: steps between measurements of the quantized loss over all batches.
        start: ``"hadamard"`` or ``"random"`` (Q₀ of every group), as :func:`rotate` draws.
        heads: learn the heads' value–output rotations too.
        seed: seeds the start.
        untie: give a tied LM head its own copy first (:func:`paramsym.untie`), so that the
            stream rotates.
        skip: readers kept in floating point (as :func:`quantized_call`).
    """

    steps: int = 100
    lr: float = 1e-2
    eval_every: int = 25
    start: str = "hadamard"
    heads: bool = True
    seed: int = 0
    untie: bool = True
    skip: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.steps < 0 or self.eval_every < 1 or not self.lr > 0:
            raise InvalidArgumentError(
                f"LearnedRotationConfig: steps ≥ 0, eval_every ≥ 1 and lr > 0 are needed, got "
                f"{self.steps}, {self.eval_every}, {self.lr}"
            )
        if self.start not in ROTATIONS:
            raise InvalidArgumentError(
                f"LearnedRotationConfig: start must be one of {ROTATIONS}, got {self.start!r}"
            )


@dataclass
class LearnedRotation:
    """What the learning measured: the quantized loss over the batches before and after (the
    best point), and at every measurement."""

    loss_before: float
    loss_after: float
    history: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0


def cayley(start: Tensor, free: Tensor) -> Tensor:
    """``start · (I − A)⁻¹ (I + A)`` with ``A = free − freeᵀ``: orthogonal when ``start`` is."""
    skew = free - free.T
    eye = torch.eye(free.shape[0], dtype=free.dtype, device=free.device)
    return start @ torch.linalg.solve(eye - skew, eye + skew)


def learn_rotation(
    model: torch.nn.Module,
    example_input: Any,
    loss_fn: LossFn,
    batches: Sequence[tuple[Any, Any]],
    weights: Quantizer | None,
    activations: Quantizer | None = None,
    config: LearnedRotationConfig | None = None,
) -> tuple[RotationResult, LearnedRotation]:
    """``model`` folded and rotated by rotations trained on its quantized loss (module
    docstring).

    Args:
        model: any model :func:`paramsym.symmetries` traces (left unchanged).
        example_input: a batch the model accepts (the groups are read off its graph).
        loss_fn: ``loss_fn(output, target) -> scalar`` on the model's own output.
        batches: ``(input, target)`` pairs of training (calibration) data.
        weights, activations: the quantizers of the readers' weights and inputs (at least
            one).
        config: :class:`LearnedRotationConfig`.

    Returns:
        (:class:`~paramsym.quantization.RotationResult`, :class:`LearnedRotation`).
    """
    config = config or LearnedRotationConfig()
    batches = list(batches)
    if not batches:
        raise InvalidArgumentError("learn_rotation: batches is empty; give (input, target) pairs")
    if weights is None and activations is None:
        raise InvalidArgumentError(
            "learn_rotation: give a weight or an activation Quantizer (nothing is quantized)"
        )
    begin = time.perf_counter()
    folded, streams, values = prepared(
        model, example_input, heads=config.heads, where="learn_rotation", untie=config.untie
    )
    groups = [*streams, *values]
    base = {k: v.detach() for k, v in folded.named_parameters()}
    dtype = next(iter(base.values())).dtype
    generator = torch.Generator().manual_seed(config.seed)
    starts = [random_rotation(s.width, config.start, generator, dtype) for s in groups]  # type: ignore[arg-type]
    free = [torch.zeros_like(q, requires_grad=True) for q in starts]

    def moved(matrices: Sequence[Tensor]) -> dict[str, Tensor]:
        state = dict(base)
        for s, q in zip(groups, matrices, strict=True):
            state.update(s.act({k: state[k] for k in s.parameter_names}, q))
        return state

    def loss(matrices: Sequence[Tensor], batch: tuple[Any, Any]) -> Tensor:
        output = quantized_call(
            folded,
            moved(matrices),
            batch[0],
            weights=weights,
            activations=activations,
            ste=True,
            skip=config.skip,
        )
        return loss_fn(output, batch[1])

    def measured(matrices: Sequence[Tensor]) -> float:
        with torch.no_grad():
            return math.fsum(float(loss(matrices, b)) for b in batches) / len(batches)

    def rotations(frees: Sequence[Tensor]) -> list[Tensor]:
        return [cayley(q, s) for q, s in zip(starts, frees, strict=True)]

    was_training = folded.training
    folded.eval()
    try:
        best = adam_keep_best(
            free,
            lambda batch: loss(rotations(free), batch),
            lambda: measured(rotations(free)),
            batches,
            steps=config.steps,
            lr=config.lr,
            eval_every=config.eval_every,
            where="learn_rotation: the quantized loss",
            before=measured(starts),
        )
    finally:
        folded.train(was_training)
    with torch.no_grad():
        final = rotations(best.parameters)
    act_all(folded, groups, final)
    table = {s.name: q for s, q in zip(groups, final, strict=True)}
    seconds = time.perf_counter() - begin
    result = RotationResult(
        model=folded,
        rotations=table,
        streams=[s.name for s in streams],
        heads=[s.name for s in values],
        output_change=output_change(model, folded, example_input),
        orthogonality=orthogonality(table),
        **transform_report(folded),
    )
    learned = LearnedRotation(best.before, best.value, best.history, config.steps, seconds)
    return result, learned
