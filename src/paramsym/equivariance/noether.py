"""Noether flow: the drift of a symmetry's charge under SGD (seed 003 §5.2, Corollary 2).

Take a symmetry θ ↦ exp(gA)θ of *every per-sample loss* ℓ_i with a symmetric generator
A = Aᵀ (``(P, P)``, in :func:`~paramsym.flatten` order): its characteristic direction
J = Aθ is the gradient of the charge Q(θ) = ½θᵀAθ (eq. 5), so gradient flow conserves Q, and
∂J = A. Examples: layer rescaling of a ReLU net, A = diag(+1 on W₁, −1 on W₂), with
Q = ½(‖W₁‖² − ‖W₂‖²); GL of a linear factorisation with a symmetric generator.

**SDE convention.** Following Ziyin et al. (2024), SGD with step η and batch size B is modelled
by dθ = −∇L dt + √(2σ²Σ(θ)) dW with σ² = η/(2B) and Σ = (1/n)Σ_i g_i g_iᵀ − ∇L∇Lᵀ the covariance
of the per-sample gradients g_i = ∇ℓ_i (population normalisation 1/n). Itô's formula gives
the charge's drift per unit time σ² Tr(Σ∂J), and **Corollary 2** rewrites it:

    Tr(Σ ∂J) = −½⟨J, ∇Tr Σ(θ)⟩                                          (exact identity)

(per sample, item 2a gives H_i J = −(∂J)ᵀ g_i). One SGD step lasts time η, so the SDE predicts
(η²/2B)·Tr(Σ∂J) per step.

**One discrete SGD step, exactly.** With g_B the mean gradient of a batch of B samples,
Q(θ − ηg_B) − Q(θ) = −η⟨J, g_B⟩ + ½η² g_Bᵀ(∂J)g_B, and ⟨J, g_i⟩ = 0 for every sample, so
the expected drift over the batch draw is

    E[ΔQ] = ½η² ∇Lᵀ(∂J)∇L + (η²/2B)·Tr(Σ∂J)·κ,   κ = (n − B)/(n − 1) without replacement
                                                    (κ = 1 with replacement),

the gradient-descent term (:func:`~paramsym.conserved.predicted_drift` of the charge) plus the
SDE's noise term. The first is *not* small: at B = 1 it is of the same order as the second
(note 003 §5b), so compare the noise term with a measurement only after subtracting it.
:func:`noether_drift` computes both sides of the identity and the prediction;
:func:`measure_sgd_drift` runs SGD steps and gives the measured mean with a confidence interval
(per-step std/mean is about 5 on small nets: ~10⁴ steps for ±10%).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.conserved.base import ConservedQuantity, loss_gradient
from paramsym.conserved.drift import predicted_drift
from paramsym.core.params import Params, flatten, functional_call, unflatten
from paramsym.core.seeding import make_generator
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    StackedLoss,
    relative_residual,
    scalar_loss,
    spectral_norm,
    unpack_batch,
    vector_norm,
)
from paramsym.errors import InvalidArgumentError, ShapeError


class QuadraticCharge(ConservedQuantity):
    """Q(θ) = ½ θᵀAθ for a symmetric ``(P, P)`` matrix A in :func:`~paramsym.flatten` order of
    ``like`` (eq. 5: ∇Q = Aθ = J). Quadratic, so one GD step changes it by exactly
    ½η²∇Lᵀ A ∇L when J ⟂ ∇L (:func:`~paramsym.conserved.predicted_drift`)."""

    quadratic = True

    def __init__(self, A: Tensor, like: Mapping[str, Tensor], name: str = "½θᵀAθ") -> None:
        size = sum(t.numel() for t in like.values())
        if A.shape != (size, size):
            raise ShapeError(
                f"QuadraticCharge: A has shape {tuple(A.shape)}, expected ({size}, {size}) for "
                f"the {len(like)} parameter tensors given (flatten order)"
            )
        asymmetry = vector_norm(A - A.T)
        if asymmetry > 1e-12 * max(vector_norm(A), 1e-300):
            raise InvalidArgumentError(
                f"QuadraticCharge: A is not symmetric (‖A − Aᵀ‖ = {asymmetry:.2e}); J = Aθ is "
                "the gradient of a charge only for symmetric A (an antisymmetric generator, "
                "a rotation, has none: note 003 §3)"
            )
        self.A, self.name = A, name

    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        theta = flatten(params)
        return 0.5 * theta @ (self.A.to(theta) @ theta)

    def magnitude(self, params: Mapping[str, Tensor]) -> Tensor:
        """½ |θ|ᵀ|A||θ|: the sum of the magnitudes of the terms of ½θᵀAθ."""
        theta = flatten(params).abs()
        return 0.5 * theta @ (self.A.to(theta).abs() @ theta)


def layer_rescaling_generator(
    params: Mapping[str, Tensor], scaled_up: Sequence[str], scaled_down: Sequence[str]
) -> Tensor:
    """A = diag(+1 on ``scaled_up``, −1 on ``scaled_down``, 0 elsewhere), shape ``(P, P)``.

    The generator of (W_up, W_down) ↦ (e^g W_up, e^{−g} W_down), a symmetry of every
    per-sample loss of a bias-free ReLU or linear net when the two are consecutive layers'
    weights; Q = ½(‖W_up‖² − ‖W_down‖²).
    """
    for name in (*scaled_up, *scaled_down):
        if name not in params:
            raise InvalidArgumentError(
                f"layer_rescaling_generator: no parameter '{name}'; the parameters are "
                f"{list(params)}"
            )
    signs = {name: 1.0 for name in scaled_up} | {name: -1.0 for name in scaled_down}
    diagonal = torch.cat(
        [torch.full((t.numel(),), signs.get(k, 0.0), dtype=t.dtype) for k, t in params.items()]
    )
    return torch.diag(diagonal)


def _per_sample_gradients(
    model: nn.Module, loss_fn: LossFn, x: Tensor, y: Tensor, point: Params
) -> Tensor:
    """The ``(n, P)`` matrix of per-sample gradients g_i = ∇ℓ_i (``torch.func.vmap``)."""

    def sample_loss(p: Params, xi: Tensor, yi: Tensor) -> Tensor:
        return scalar_loss(loss_fn, functional_call(model, p, xi[None]), yi[None], "noether")

    grads = torch.func.vmap(torch.func.grad(sample_loss), in_dims=(None, 0, 0))(point, x, y)
    return torch.cat([g.reshape(x.shape[0], -1) for g in grads.values()], dim=1)


def _trace_sigma(model: nn.Module, loss_fn: LossFn, x: Tensor, y: Tensor, point: Params) -> Tensor:
    """Tr Σ(θ) = (1/n)Σ‖g_i‖² − ‖ḡ‖², differentiable in θ."""
    grads = _per_sample_gradients(model, loss_fn, x, y, point)
    return (grads * grads).sum(dim=1).mean() - (grads.mean(dim=0) ** 2).sum()


def _population_factor(n: int, batch_size: int, replacement: bool) -> float:
    if batch_size < 1 or (not replacement and batch_size > n):
        raise InvalidArgumentError(
            f"batch_size must be between 1 and the number of samples {n} (without replacement), "
            f"got {batch_size}"
        )
    if replacement:
        return 1.0
    return (n - batch_size) / (n - 1) if n > 1 else 0.0


def _check_mean_loss(stacked: StackedLoss, grads_loss: Tensor, where: str) -> None:
    total, mean = float(stacked.loss), float(grads_loss)
    if abs(total - mean) > 1e-6 * max(abs(total), abs(mean), 1e-300):
        raise InvalidArgumentError(
            f"{where}: the batch loss {total:.6g} is not the mean of the per-sample losses "
            f"({mean:.6g}); SGD's drift is derived for L = (1/n)Σℓ_i: use reduction='mean'"
        )


@dataclass
class NoetherDrift(ApplicationResult):
    """Corollary 2 and the predicted one-step drift of Q = ½θᵀAθ (see the module docstring).

    Attributes:
        charge: Q(θ).
        trace_sigma_dj: Tr(Σ∂J) = Tr(ΣA).
        minus_half_j_grad_trace_sigma: −½⟨J, ∇TrΣ⟩.
        identity_residual: |difference| / (‖A‖₂((1/n)Σ‖g_i‖² + ‖∇L‖²) + ½‖J‖‖∇TrΣ‖).
        symmetry_residual: max_i |⟨J, g_i⟩| / (‖J‖‖g_i‖): zero when every per-sample loss has
            the symmetry, which the corollary needs.
        lr, batch_size, num_samples, replacement: η, B, n and how batches are drawn.
        finite_population_factor: κ = (n − B)/(n − 1) without replacement, 1 with.
        sigma_squared: σ² = η/(2B).
        sde_drift_rate: σ²Tr(Σ∂J), the charge's drift per unit time of the SDE.
        gd_drift: ½η²∇Lᵀ(∂J)∇L, one full-batch GD step (exact).
        noise_drift: (η²/2B)·κ·Tr(Σ∂J).
        sgd_drift: gd_drift + noise_drift, the exact expected change in one SGD step.
    """

    charge: float
    trace_sigma_dj: float
    minus_half_j_grad_trace_sigma: float
    identity_residual: float
    symmetry_residual: float
    lr: float
    batch_size: int
    num_samples: int
    replacement: bool
    finite_population_factor: float
    sigma_squared: float
    sde_drift_rate: float
    gd_drift: float
    noise_drift: float
    sgd_drift: float

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("identity_residual", "symmetry_residual")


def noether_drift(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    A: Tensor,
    lr: float,
    batch_size: int,
    params: Mapping[str, Tensor] | None = None,
    *,
    replacement: bool = False,
) -> NoetherDrift:
    """Corollary 2's identity Tr(Σ∂J) = −½⟨J, ∇TrΣ⟩ and the predicted SGD drift of ½θᵀAθ.

    Per-sample gradients come from ``torch.func.vmap`` (one row per sample, ``(n, P)``), and
    ∇TrΣ from differentiating them once more (reverse over vmap-reverse): for the small models
    on which the identity is checked. The prediction itself needs only the per-sample
    gradients.

    Args:
        model, loss_fn, batch: the n samples SGD draws from; ``loss_fn`` must average over
            samples (L = (1/n)Σℓ_i, checked), and ``x`` must be one tensor with samples along
            its first axis.
        A: the symmetric generator, ``(P, P)`` in :func:`~paramsym.flatten` order of the
            trainable parameters (or of ``params``).
        lr: η. batch_size: B.
        params: θ (default: the model's trainable parameters).
        replacement: whether a batch is drawn with replacement (κ = 1) or not.
    """
    where = "noether_drift"
    stacked = StackedLoss(model, loss_fn, batch, params, where=where)
    point = stacked.point
    x, y = unpack_batch(batch, where)
    if not isinstance(x, Tensor):
        raise InvalidArgumentError(f"{where}: the inputs must be one tensor (samples first)")
    n = int(x.shape[0])
    kappa = _population_factor(n, batch_size, replacement)
    charge = QuadraticCharge(A, point)
    matrix = charge.A.to(flatten(point))
    grads = _per_sample_gradients(model, loss_fn, x, y, point)
    mean_grad = grads.mean(dim=0)
    losses = torch.func.vmap(
        lambda xi, yi: scalar_loss(
            loss_fn, functional_call(model, point, xi[None]), yi[None], where
        )
    )(x, y)
    _check_mean_loss(stacked, losses.mean(), where)

    trace = float(((grads @ matrix) * grads).sum(dim=1).mean() - mean_grad @ matrix @ mean_grad)
    grad_trace = flatten(
        torch.func.grad(lambda p: _trace_sigma(model, loss_fn, x, y, p))(point)
    ).detach()
    j = matrix @ flatten(point)
    rhs = -0.5 * float(j @ grad_trace)
    scale = spectral_norm(matrix) * (
        float((grads * grads).sum(dim=1).mean()) + vector_norm(mean_grad) ** 2
    ) + 0.5 * vector_norm(j) * vector_norm(grad_trace)
    grad_norms = torch.linalg.vector_norm(grads, dim=1)
    sym = [
        relative_residual(abs(float(j @ g)), vector_norm(j) * float(nrm))
        for g, nrm in zip(grads, grad_norms, strict=True)
    ]

    gd = float(predicted_drift(charge, point, unflatten(mean_grad, point), lr).change)
    noise = lr * lr / (2 * batch_size) * kappa * trace
    sigma_sq = lr / (2 * batch_size)
    return NoetherDrift(
        charge=float(charge(point)),
        trace_sigma_dj=trace,
        minus_half_j_grad_trace_sigma=rhs,
        identity_residual=relative_residual(abs(trace - rhs), scale),
        symmetry_residual=max(sym),
        lr=float(lr),
        batch_size=int(batch_size),
        num_samples=n,
        replacement=bool(replacement),
        finite_population_factor=kappa,
        sigma_squared=sigma_sq,
        sde_drift_rate=sigma_sq * trace,
        gd_drift=gd,
        noise_drift=noise,
        sgd_drift=gd + noise,
    )


@dataclass
class MeasuredDrift:
    """The mean one-step change of Q = ½θᵀAθ over SGD steps, against the prediction.

    Attributes:
        steps: number of SGD steps measured.
        mean_drift: mean of ΔQ_t = Q(θ_{t+1}) − Q(θ_t).
        drift_half_width: half-width of its ``confidence`` interval (normal approximation).
        std_over_mean: per-step std(ΔQ)/|mean| (about 5 on small nets).
        mean_predicted: mean of the predicted E[ΔQ] at the points stepped from
            (:func:`noether_drift`'s ``sgd_drift``).
        mean_difference: mean of ΔQ_t − predicted_t (a martingale difference: mean 0 if the
            prediction is right).
        difference_half_width: half-width of its interval.
        consistent: |mean_difference| ≤ difference_half_width.
        confidence: the interval's level.
        restart: whether every step started from the same θ (independent draws) or the steps
            formed one SGD trajectory.
    """

    steps: int
    mean_drift: float
    drift_half_width: float
    std_over_mean: float
    mean_predicted: float
    mean_difference: float
    difference_half_width: float
    consistent: bool
    confidence: float
    restart: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain-number fields, for JSON."""
        return asdict(self)


def _prediction(grads: Tensor, matrix: Tensor, lr: float, batch_size: int, kappa: float) -> float:
    mean_grad = grads.mean(dim=0)
    gd = 0.5 * lr * lr * float(mean_grad @ matrix @ mean_grad)
    trace = float(((grads @ matrix) * grads).sum(dim=1).mean() - mean_grad @ matrix @ mean_grad)
    return gd + lr * lr / (2 * batch_size) * kappa * trace


def measure_sgd_drift(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    A: Tensor,
    lr: float,
    batch_size: int,
    steps: int,
    params: Mapping[str, Tensor] | None = None,
    *,
    replacement: bool = False,
    restart: bool = True,
    confidence: float = 0.95,
    generator: torch.Generator | int | None = None,
) -> MeasuredDrift:
    """Run SGD steps and measure the mean change of Q = ½θᵀAθ per step, with an interval.

    Each step draws B samples uniformly (distinct ones unless ``replacement``), independently
    of earlier steps, takes θ ← θ − η∇L_B, and records ΔQ = −η⟨Aθ, g_B⟩ + ½η² g_BᵀAg_B (the
    exact change, written so as not to lose digits to Q's own size). With ``restart=True``
    every step starts from the same θ, so the ΔQ_t are independent draws of one step's change
    and the prediction is a single number; with ``restart=False`` they form one trajectory and
    the prediction is recomputed at each θ_t (per-sample gradients every step). The model is
    not modified.

    Args:
        model, loss_fn, batch, A, lr, batch_size, params, replacement: as in
            :func:`noether_drift`.
        steps: number of SGD steps (≥ 2).
        restart: independent one-step draws from θ (``True``) or one trajectory.
        confidence: level of the normal-approximation intervals.
        generator: for the batch draws (default seeded with 0).
    """
    where = "measure_sgd_drift"
    if steps < 2:
        raise InvalidArgumentError(f"{where}: steps must be >= 2, got {steps}")
    if not 0.0 < confidence < 1.0:
        raise InvalidArgumentError(f"{where}: confidence must be in (0, 1), got {confidence}")
    stacked = StackedLoss(model, loss_fn, batch, params, where=where)
    x, y = unpack_batch(batch, where)
    if not isinstance(x, Tensor):
        raise InvalidArgumentError(f"{where}: the inputs must be one tensor (samples first)")
    n = int(x.shape[0])
    kappa = _population_factor(n, batch_size, replacement)
    point = stacked.point
    matrix = QuadraticCharge(A, point).A.to(flatten(point))
    gen = make_generator(generator)
    drifts: list[float] = []
    predictions: list[float] = []
    prediction = _prediction(
        _per_sample_gradients(model, loss_fn, x, y, point), matrix, lr, batch_size, kappa
    )
    theta = point
    for _ in range(steps):
        if not restart:
            grads = _per_sample_gradients(model, loss_fn, x, y, theta)
            prediction = _prediction(grads, matrix, lr, batch_size, kappa)
        if replacement:
            index = torch.randint(n, (batch_size,), generator=gen)
        else:
            index = torch.randperm(n, generator=gen)[:batch_size]
        step = flatten(loss_gradient(model, loss_fn, (x[index], y[index]), theta))
        flat = flatten(theta)
        drifts.append(float(-lr * (matrix @ flat) @ step + 0.5 * lr * lr * step @ (matrix @ step)))
        predictions.append(prediction)
        if not restart:
            theta = {k: t.detach() for k, t in unflatten(flat - lr * step, point).items()}
    measured = torch.tensor(drifts, dtype=torch.float64)
    difference = measured - torch.tensor(predictions, dtype=torch.float64)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    root = math.sqrt(steps)
    mean = float(measured.mean())
    std = float(measured.std())
    half = z * std / root
    diff_half = z * float(difference.std()) / root
    mean_difference = float(difference.mean())
    return MeasuredDrift(
        steps=steps,
        mean_drift=mean,
        drift_half_width=half,
        std_over_mean=std / abs(mean) if mean != 0.0 else math.inf,
        mean_predicted=float(sum(predictions) / steps),
        mean_difference=mean_difference,
        difference_half_width=diff_half,
        consistent=abs(mean_difference) <= diff_half,
        confidence=confidence,
        restart=restart,
    )
