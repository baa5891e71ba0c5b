"""Shared helpers of the conserved-quantity experiments (seed 001, ch. 2; Zhao et al., ICLR 2023).

The loss, Spearman's ρ, batched gradient descent on U σ(Vᵀ), the initialisations at a target Q
and the elementwise Q, used by ``q-distribution``, ``q-convergence``, ``q-sharpness`` and
``q-drift``.

The common setup is described in :mod:`paramsym.experiments.conserved`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats
import torch
from torch import Tensor

import paramsym as ps
from paramsym.conserved import (
    ElementwiseQ,
    q_init_scales,
    xavier_q_statistics,
)

ELEMENTWISE: dict[str, Callable[[Tensor], Tensor]] = {
    "identity": lambda z: z,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}
"""The activations of Figs 2.3, 2.4, 2.7 and A.1, as functions (the same as ``ps.mlp``'s)."""

SOURCE = "seed 001"


def sum_squares(output: Tensor, target: Tensor) -> Tensor:
    """‖output − target‖²_F, the loss of Figs 2.4, 2.7 and A.1 (no ½, as printed)."""
    return ((output - target) ** 2).sum()


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (NaN when either side is constant or has < 3 values)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3 or np.ptp(a[keep]) == 0 or np.ptp(b[keep]) == 0:
        return math.nan
    return float(scipy.stats.spearmanr(a[keep], b[keep]).statistic)


# -- batched gradient descent on U σ(Vᵀ) -------------------------------------------------------


@dataclass
class Trajectories:
    """B runs of full-batch gradient descent on ‖Y − U σ(Vᵀ)‖²_F, whitened input.

    Attributes:
        losses: (B, T) loss before each step (T = steps + 1 unless stopped early).
        checkpoints: steps at which the weights were kept.
        incoming, outgoing: the kept weights, lists of (B, h, n) (Vᵀ) and (B, m, h) (U).
    """

    losses: Tensor
    checkpoints: list[int]
    incoming: list[Tensor]
    outgoing: list[Tensor]


def two_layer_output(activation: str, incoming: Tensor, outgoing: Tensor) -> Tensor:
    """Outputs on X = I_n of B nets ``ps.mlp([n, h, m], σ, bias=False)``: σ(W₁)ᵀW₂ᵀ, (B, n, m)."""
    return ELEMENTWISE[activation](incoming).transpose(1, 2) @ outgoing.transpose(1, 2)


def batched_gradient_descent(
    activation: str,
    incoming: Tensor,
    outgoing: Tensor,
    target: Tensor,
    lr: float | Tensor,
    steps: int,
    *,
    keep_every: int = 0,
    stop_below: float | None = None,
) -> Trajectories:
    """Full-batch GD, W ← W − η∇L, of B independent nets at once (float64).

    Args:
        activation: a key of :data:`ELEMENTWISE`.
        incoming, outgoing: initial first (B, h, n) and second (B, m, h) weights.
        target: Y as the nets' output on I_n, shape (n, m).
        lr: η, one number or one per run (B,).
        steps: most GD steps.
        keep_every: keep the weights every this many steps (0: first and last only).
        stop_below: stop once every run's loss is below this.
    """
    w1 = incoming.detach().clone().requires_grad_(True)
    w2 = outgoing.detach().clone().requires_grad_(True)
    rate = torch.as_tensor(lr, dtype=w1.dtype).reshape(-1, 1, 1)
    losses: list[Tensor] = []
    kept: tuple[list[int], list[Tensor], list[Tensor]] = ([], [], [])

    def keep(step: int) -> None:
        kept[0].append(step)
        kept[1].append(w1.detach().clone())
        kept[2].append(w2.detach().clone())

    for step in range(steps + 1):
        residual = two_layer_output(activation, w1, w2) - target
        per_run = (residual**2).sum(dim=(1, 2))
        losses.append(per_run.detach())
        done = step == steps or (stop_below is not None and bool((per_run < stop_below).all()))
        due = (keep_every and step % keep_every == 0) or step == 0 or done
        if due and (not kept[0] or kept[0][-1] != step):
            keep(step)
        if done:
            break
        g1, g2 = torch.autograd.grad(per_run.sum(), (w1, w2))
        with torch.no_grad():
            w1 -= rate * g1
            w2 -= rate * g2
    return Trajectories(torch.stack(losses, dim=1), *kept)


def steps_to_threshold(losses: Tensor, threshold: float) -> list[float]:
    """Per run (row), the first step whose loss is ≤ ``threshold``; NaN if none."""
    below = losses <= threshold
    return [float(int(row.nonzero()[0])) if bool(row.any()) else math.nan for row in below]


def init_scales(
    outputs: int, hidden: int, inputs: int, target: float, activation: str, scheme: str
) -> tuple[float, float]:
    """(s_U, s_V) with E[Q] = ``target`` (Eq. 2.17 at Gaussian init).

    ``scheme="product"``: s_U·s_V = 1/√(hn) fixed (``q_init_scales``); ``"outgoing"``:
    s_V = 1/√n (Xavier) fixed and s_U² = 2(target + hn E[F_σ(v)])/(mh), which needs
    target > −hn E[F_σ(v)].
    """
    if scheme == "product":
        return q_init_scales(outputs, hidden, inputs, target, activation)
    if scheme != "outgoing":
        raise ps.InvalidArgumentError(
            f"init scheme must be 'product' or 'outgoing', got {scheme!r}"
        )
    floor = xavier_q_statistics(outputs, hidden, inputs, activation, u_std=0.0).mean
    if target <= floor:
        raise ps.InvalidArgumentError(
            f"init scheme 'outgoing': E[Q] = {target} is below {floor:.3g}, the value at s_U = 0"
        )
    return math.sqrt(2 * (target - floor) / (outputs * hidden)), 1.0 / math.sqrt(inputs)


def initial_weights(
    outputs: int,
    hidden: int,
    inputs: int,
    activation: str,
    targets: Sequence[float],
    generator: torch.Generator,
    scheme: str = "product",
) -> tuple[Tensor, Tensor, list[tuple[float, float]]]:
    """Gaussian (incoming (B, h, n), outgoing (B, m, h)) with E[Q] = each target of ``targets``
    (:func:`init_scales`), and the (s_U, s_V) used."""
    firsts, seconds, scales = [], [], []
    for target in targets:
        su, sv = init_scales(outputs, hidden, inputs, float(target), activation, scheme)
        firsts.append(sv * torch.randn(hidden, inputs, generator=generator, dtype=torch.float64))
        seconds.append(su * torch.randn(outputs, hidden, generator=generator, dtype=torch.float64))
        scales.append((su, sv))
    return torch.stack(firsts), torch.stack(seconds), scales


def elementwise_q(activation: str, incoming: Tensor, outgoing: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 2.17's Q (the library's :class:`ElementwiseQ`) of B nets and its App. A.4.2
    normaliser |½‖U‖²| + |ΣF_σ(V)|, each shape (B,)."""
    _, h, n = incoming.shape
    m = outgoing.shape[1]
    q = ElementwiseQ(ps.mlp([n, h, m], activation, bias=False, dtype=torch.float64))
    values, sizes = [], []
    for w1, w2 in zip(incoming, outgoing, strict=True):
        point = {"0.weight": w1, "2.weight": w2}
        values.append(q(point))
        sizes.append(q.magnitude(point))
    return torch.stack(values), torch.stack(sizes)


def rho_text(rho: dict[str, float]) -> str:
    return ", ".join(f"{k}: {v:+.2f}" for k, v in rho.items())
