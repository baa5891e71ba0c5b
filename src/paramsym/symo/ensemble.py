"""Global curvature by Monte Carlo: N models with random initialisations, trained t steps by the
same rule, their gradient covariance and mean Hessian (seed 002 Eqs. 2–3, 95; Figs. 2–4, 7–9).

Parameters of the N models are one params dict with a leading model axis (``(N, *shape)``);
gradients, training steps and Hessians run under ``torch.func.vmap`` (Hessians in chunks). The
covariance and Hessian are dense ``P × P`` matrices — meant for the small networks of the
structure figures. :func:`projection_residuals` measures how far the Monte-Carlo matrix is
from the invariant space as N grows (notes 002 §5.5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, functional_call
from paramsym.errors import InvalidArgumentError
from paramsym.symo.factors import Factors
from paramsym.symo.structure import CurvatureStructure

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Tensor]


@dataclass(frozen=True)
class GaussianInit:
    """Invariant initialisation (App. D): weights N(0, fan_in^(−2·weight_power)), biases
    N(0, bias_std²). ``weight_power=0.5`` is std 1/√fan_in (the authors' Tanh runs),
    ``1.0`` is std 1/fan_in (their ReLU figure); biases N(0, 1/9) in their Fig. 2 code."""

    weight_power: float = 0.5
    bias_std: float = 1.0 / 3.0

    def __call__(
        self, structure: CurvatureStructure, n: int, generator: torch.Generator, dtype: torch.dtype
    ) -> Params:
        layout = structure.layout
        out: Params = {}
        for name in layout.parameter_names:
            shape = layout.shape(name)
            std = shape[1] ** (-self.weight_power) if len(shape) == 2 else self.bias_std
            out[name] = std * torch.randn(n, *shape, generator=generator, dtype=dtype)
        return out


def init_ensemble(
    structure: CurvatureStructure,
    n: int,
    *,
    init: Callable[..., Params] | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> Params:
    """``n`` independent draws of the parameters, stacked: ``{name: (n, *shape)}``."""
    if n < 1:
        raise InvalidArgumentError(f"init_ensemble: n must be >= 1, got {n}")
    generator = torch.Generator().manual_seed(seed)
    return (init or GaussianInit())(structure, n, generator, dtype)


def _loss_of(model: nn.Module, loss_fn: LossFn, batch: Batch) -> Callable[[Params], Tensor]:
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise InvalidArgumentError("batch must be an (inputs, targets) tuple")
    x, y = batch
    return lambda p: loss_fn(functional_call(model, p, x), y)


def _check_stacked(structure: CurvatureStructure, stacked: Mapping[str, Tensor]) -> int:
    batch = structure.batch_shape(stacked, "stacked params")
    if len(batch) != 1:
        raise InvalidArgumentError(
            f"stacked params need exactly one leading model axis, got batch shape {batch}"
        )
    return batch[0]


def ensemble_gradients(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    stacked: Mapping[str, Tensor],
    *,
    chunk_size: int | None = None,
    structure: CurvatureStructure | None = None,
) -> Params:
    """∇L of every model: ``{name: (N, *shape)}`` (``vmap`` of ``torch.func.grad``, over
    ``chunk_size`` models at a time to bound memory; ``None``: all at once)."""
    structure = structure or CurvatureStructure.from_model(model)
    _check_stacked(structure, stacked)
    grad = torch.func.grad(_loss_of(model, loss_fn, batch))
    return dict(torch.func.vmap(grad, chunk_size=chunk_size)(dict(stacked)))


def train_ensemble(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    stacked: Mapping[str, Tensor],
    *,
    steps: int,
    lr: float,
    chunk_size: int | None = None,
    structure: CurvatureStructure | None = None,
) -> Params:
    """``steps`` full-batch GD steps θ ← θ − lr ∇L for every model at once (GD is equivariant,
    so the distribution stays invariant: Theorem 2.2, Corollary 2.3)."""
    if steps < 0 or not lr > 0:
        raise InvalidArgumentError(f"train_ensemble: need steps >= 0 and lr > 0, got {steps}, {lr}")
    params = dict(stacked)
    for _ in range(steps):
        grads = ensemble_gradients(
            model, loss_fn, batch, params, chunk_size=chunk_size, structure=structure
        )
        params = {k: params[k] - lr * grads[k] for k in params}
    return params


@dataclass
class MonteCarloMoments:
    """Dense Monte-Carlo moments over N models.

    Attributes:
        mean: the mean, shape ``(P,)`` (zero for a Hessian).
        matrix: the covariance (or mean Hessian), ``(P, P)``, in :func:`paramsym.flatten`
            order.
        n: the number of models.
    """

    mean: Tensor
    matrix: Tensor
    n: int


def gradient_covariance(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    stacked: Mapping[str, Tensor],
    *,
    center: bool = True,
    chunk_size: int | None = None,
    structure: CurvatureStructure | None = None,
) -> MonteCarloMoments:
    """The gradient covariance (1/N) Σ (g − ḡ)(g − ḡ)ᵀ over the N models (Eq. 3), or the
    second moment if ``center=False``."""
    structure = structure or CurvatureStructure.from_model(model)
    grads = ensemble_gradients(
        model, loss_fn, batch, stacked, chunk_size=chunk_size, structure=structure
    )
    return covariance_of(structure, grads, center=center)


def covariance_of(
    structure: CurvatureStructure, grads: Mapping[str, Tensor], *, center: bool = True
) -> MonteCarloMoments:
    """Dense mean and covariance of stacked gradients ``{name: (N, *shape)}``."""
    n = _check_stacked(structure, grads)
    flat = structure.flatten(grads)
    mean = flat.mean(0)
    second = flat.T @ flat / n
    matrix = second - torch.outer(mean, mean) if center else second
    return MonteCarloMoments(mean, matrix, n)


def global_hessian(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    stacked: Mapping[str, Tensor],
    *,
    chunk_size: int = 256,
    structure: CurvatureStructure | None = None,
) -> Tensor:
    """E_θ ∇²L(θ) over the N models (Eq. 95), ``(P, P)`` in :func:`paramsym.flatten` order:
    ``vmap`` of ``jacrev(grad)`` over chunks of ``chunk_size`` models."""
    return global_hessian_prefixes(
        model, loss_fn, batch, stacked, [0], chunk_size=chunk_size, structure=structure
    )[-1]


def global_hessian_prefixes(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    stacked: Mapping[str, Tensor],
    sizes: Sequence[int],
    *,
    chunk_size: int = 256,
    structure: CurvatureStructure | None = None,
) -> list[Tensor]:
    """The mean Hessian of the first ``k`` models for each ``k`` in ``sizes`` (0 means all N),
    in one pass: for the residual-versus-N curves of the Hessian figures."""
    structure = structure or CurvatureStructure.from_model(model)
    n = _check_stacked(structure, stacked)
    wanted = sorted({n if k == 0 else int(k) for k in sizes})
    if wanted[0] < 1 or wanted[-1] > n:
        raise InvalidArgumentError(f"global_hessian: sizes must be in 1..{n}, got {list(sizes)}")
    if chunk_size < 1:
        raise InvalidArgumentError(f"global_hessian: chunk_size must be >= 1, got {chunk_size}")
    loss = _loss_of(model, loss_fn, batch)

    def flat_loss(theta: Tensor) -> Tensor:
        return loss(structure.unflatten(theta))

    # reverse-over-reverse: forward-over-reverse fails through nn.MSELoss (pytorch#123996)
    hessian = torch.func.vmap(torch.func.jacrev(torch.func.grad(flat_loss)))
    flat = structure.flatten(stacked)
    total = torch.zeros(flat.shape[1], flat.shape[1], dtype=flat.dtype, device=flat.device)
    done = 0
    results: dict[int, Tensor] = {}
    for stop in wanted:
        while done < stop:
            end = min(stop, done + chunk_size)
            total += hessian(flat[done:end]).sum(0)
            done = end
        results[stop] = total / stop
    return [results[n if k == 0 else int(k)] for k in sizes]


def projection_residual(structure: CurvatureStructure, matrix: Tensor) -> float:
    """‖X − P(X)‖_F / ‖X‖_F, with P the Reynolds projection onto invariant matrices
    (:meth:`~paramsym.symo.factors.Factors.from_dense`). Zero for a matrix with the predicted
    structure; for a Monte-Carlo estimate it falls as N grows."""
    projected = Factors.from_dense(structure, matrix).to_dense()
    norm = torch.linalg.matrix_norm(matrix)
    if float(norm) == 0.0:
        raise InvalidArgumentError("projection_residual: the matrix is zero")
    return float(torch.linalg.matrix_norm(matrix - projected) / norm)


def projection_residuals(
    structure: CurvatureStructure,
    grads: Mapping[str, Tensor],
    sizes: Sequence[int],
    *,
    center: bool = True,
) -> list[float]:
    """:func:`projection_residual` of the covariance of the first ``k`` gradients, for each
    ``k`` in ``sizes`` (the residual-versus-N curve)."""
    n = _check_stacked(structure, grads)
    out = []
    for k in sizes:
        if not 2 <= k <= n:
            raise InvalidArgumentError(f"projection_residuals: sizes must be in 2..{n}, got {k}")
        head = {name: g[:k] for name, g in grads.items()}
        out.append(
            projection_residual(structure, covariance_of(structure, head, center=center).matrix)
        )
    return out
