"""Learned matching: the orthogonal maps of an alignment trained on the merged model's loss
(Theus et al. 2025's "learned matching", their best method; issue 30).

Weight matching minimises ‖θ_A − g·θ_B‖, a proxy; what a merge needs is a low loss at the
midpoint. :func:`learn_alignment` starts from an
:class:`~paramsym.connectivity.alignment.AlignResult` and trains the elements of its orthogonal
groups as parameters, through a smooth parameterisation of the orthogonal elements (Q = exp(S −
Sᵀ) for a free square S; on RoPE's pairs one angle per pair), by Adam on the loss of (1 − α) θ_A
+ α·(Q·θ_B) on the training batches. The permutations stay as weight matching left them (Theus
et al.: they barely move under learned matching). The midpoint's loss over all the batches is
measured before, every ``eval_every`` steps and at the end, and the best elements are kept: the
learned alignment never ends with a higher midpoint loss than it started from. Every element is
orthogonal, so the aligned model is still B as a function: the refined result's
``output_change`` is measured anew, on the refined model against B as the user gave it."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.connectivity.alignment import AlignResult
from paramsym.core.best_adam import adam_keep_best
from paramsym.core.calls import call_arguments
from paramsym.core.params import Params, output_change, stateless_call
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry.gl import MatrixNeuronSymmetry
from paramsym.symmetry.rotary import RotaryQueryKey

LossFn = Callable[[Any, Any], Tensor]


@dataclass(frozen=True)
class LearnedAlignConfig:
    """Settings of :func:`learn_alignment`.

    Attributes:
        steps: Adam steps (one batch each, cycling through the batches).
        lr: Adam's learning rate on the generators.
        alpha: the merge weight of B whose loss is trained ((1 − α) θ_A + α θ_B).
        eval_every: steps between measurements of the midpoint loss over all batches (the
            best point so far is kept).
    """

    steps: int = 100
    lr: float = 1e-2
    alpha: float = 0.5
    eval_every: int = 25

    def __post_init__(self) -> None:
        if self.steps < 0 or self.eval_every < 1 or not self.lr > 0:
            raise InvalidArgumentError(
                f"LearnedAlignConfig: steps ≥ 0, eval_every ≥ 1 and lr > 0 are needed, got "
                f"{self.steps}, {self.eval_every}, {self.lr}"
            )
        if not 0.0 <= self.alpha <= 1.0:
            raise InvalidArgumentError(
                f"LearnedAlignConfig: alpha must be in [0, 1], got {self.alpha}"
            )


@dataclass
class LearnedAlignment:
    """What the learning did: the midpoint loss before and after, and as it was measured."""

    loss_before: float
    loss_after: float
    history: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0


def _element(s: MatrixNeuronSymmetry, generator: Tensor) -> Tensor:
    """The orthogonal element of ``s`` for its free parameters."""
    if isinstance(s, RotaryQueryKey):
        q = generator.new_zeros(s.width, s.width)
        first = torch.tensor([i for i, _ in s.pairs])
        second = torch.tensor([j for _, j in s.pairs])
        c, sn = torch.cos(generator), torch.sin(generator)
        q = q.index_put((first, first), c).index_put((second, second), c)
        return q.index_put((first, second), -sn).index_put((second, first), sn)
    return torch.linalg.matrix_exp(generator - generator.T)


def _start(s: MatrixNeuronSymmetry, reference: Tensor) -> Tensor:
    size = (len(s.pairs),) if isinstance(s, RotaryQueryKey) else (s.width, s.width)
    return torch.zeros(size, dtype=reference.dtype, device=reference.device, requires_grad=True)


def learn_alignment(
    result: AlignResult,
    loss_fn: LossFn,
    batches: Sequence[tuple[Any, Any]],
    config: LearnedAlignConfig | None = None,
) -> tuple[AlignResult, LearnedAlignment]:
    """The alignment ``result`` refined on the midpoint's loss (module docstring).

    Args:
        result: what :func:`paramsym.align` returned (its orthogonal groups are trained).
        loss_fn: ``loss_fn(output, target) -> scalar``, with the model's own output (a
            ``ModelOutput`` for Hugging Face models).
        batches: ``(input, target)`` pairs of training data (a list: every one is read again
            to measure the midpoint loss).
        config: :class:`LearnedAlignConfig`.

    Returns:
        The refined result (a new aligned model; ``result`` is unchanged) and what the learning
        measured. Its ``output_change`` is the refined model's (:func:`_refined_change`), not
        the starting alignment's.
    """
    config = config or LearnedAlignConfig()
    batches = list(batches)
    if not batches:
        raise InvalidArgumentError("learn_alignment: batches is empty; give (input, target) pairs")
    start_time = time.perf_counter()
    model = result.model
    a: Params = {k: v.detach() for k, v in result.reference.named_parameters()}
    b: Params = {k: v.detach() for k, v in model.named_parameters()}
    groups = [s for s in result.symmetries if isinstance(s, MatrixNeuronSymmetry)]
    generators = [_start(s, b[s.slots[0].name]) for s in groups]
    alpha = config.alpha

    def moved(gens: Sequence[Tensor]) -> Params:
        state = dict(b)
        for s, g in zip(groups, gens, strict=True):
            state.update(s.act({k: state[k] for k in s.parameter_names}, _element(s, g)))
        return state

    def midpoint_loss(state: Params, batch: tuple[Any, Any]) -> Tensor:
        merged = {k: (1 - alpha) * a[k] + alpha * state[k] for k in a}
        args, kwargs = call_arguments(model, batch[0])
        return loss_fn(stateless_call(model, merged, args, kwargs), batch[1])

    def measured(gens: Sequence[Tensor]) -> float:
        with torch.no_grad():
            state = moved(gens)
            return math.fsum(float(midpoint_loss(state, batch)) for batch in batches) / len(batches)

    was_training = model.training
    model.eval()
    try:
        best = adam_keep_best(
            generators,
            lambda batch: midpoint_loss(moved(generators), batch),
            lambda: measured(generators),
            batches,
            steps=config.steps,
            lr=config.lr,
            eval_every=config.eval_every,
            where="learn_alignment: the midpoint loss",
        )
    finally:
        model.train(was_training)
    aligned = copy.deepcopy(model)
    with torch.no_grad():
        for name, value in moved(best.parameters).items():
            aligned.get_parameter(name).copy_(value)
    learned = LearnedAlignment(
        loss_before=best.before,
        loss_after=best.value,
        history=best.history,
        steps=config.steps,
        seconds=time.perf_counter() - start_time,
    )
    distance = (
        math.fsum(
            float((a[k].double() - v.detach().double()).square().sum())
            for k, v in aligned.named_parameters()
        )
        ** 0.5
    )
    refined = replace(
        result,
        model=aligned,
        output_change=_refined_change(result, aligned, batches[0][0]),
        distance_after=distance,
        history=[*result.history, distance],
        method=f"{result.method}+learned",
        seconds=result.seconds + learned.seconds,
    )
    return refined, learned


def _refined_change(result: AlignResult, aligned: nn.Module, fallback_input: Any) -> float:
    """``max |B(x) − aligned(x)| / max |B(x)|`` for the refined model: against B as the user
    gave it, on the input :func:`~paramsym.align` measured on (``result.original``,
    ``result.example_input``). An :class:`AlignResult` made without them (by hand) gets the
    starting alignment's change plus the refined model's change against the starting one on
    ``fallback_input`` (the first training input): a bound, by the triangle inequality, up to
    the two outputs' scales."""
    if result.original is not None and result.example_input is not None:
        return output_change(result.original, aligned, result.example_input)
    return result.output_change + output_change(result.model, aligned, fallback_input)
