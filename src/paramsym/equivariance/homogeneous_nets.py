"""Homogeneous nets: the Euler relation and the Hessian–gradient identities (seed 003 §4.2, §5.1).

A network is m-homogeneous when f(gθ) = g^m f(θ) for every g > 0: a bias-free net of m linear
or convolutional layers with ReLU, leaky-ReLU or linear activations (and pooling between them).
This is the equivariance T(θ, g) = gθ, S(y, g) = g^m y; at g = 1 its characteristic direction
is J = θ and its characteristic output K = m f. With f the stacked output of the batch and ℓ
the loss as a function of it (:class:`~paramsym.equivariance.stacked.StackedLoss`):

* **Euler relation** (item 1 of Theorem 1): ⟨∇L, θ⟩ = m⟨∇ℓ(f), f⟩ (:func:`euler_relation`);
* **eq. (3)** (item 2a): Hθ = (m−1)∇L + m Fᵀ∇²ℓ(f) f, equivalently, since Fθ = m f, the
  Gauss–Newton form (H − G)θ = (m−1)∇L with G = Fᵀ∇²ℓ F;
* **eq. (4)** (item 2b): θᵀHθ = m² fᵀ∇²ℓ(f) f + m(m−1)⟨∇ℓ(f), f⟩ (both in
  :func:`homogeneity_hessian`).

The identities hold where f is C²; a ReLU net is, inside its linear regions (almost every θ for
generic data). Residuals follow the convention of :mod:`paramsym.equivariance.stacked`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.core.params import flatten, resolve_trainable
from paramsym.curvature import HessianOperator
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    StackedLoss,
    relative_residual,
    vector_norm,
)
from paramsym.errors import InvalidArgumentError
from paramsym.nn.layers import NTKLinear

_HOMOGENEOUS_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, NTKLinear)
"""Layers that are linear in their weight and in their input (when they have no bias)."""

_DEGREE_ONE_MAPS = (
    nn.ReLU,
    nn.LeakyReLU,
    nn.Identity,
    nn.Flatten,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
    nn.Dropout,  # the identity in eval mode; random ones are refused by every analysis
)
"""Parameter-free maps that are positively homogeneous of degree 1 in their input."""


def _leaves(module: nn.Module, prefix: str) -> Iterator[tuple[str, nn.Module]]:
    for name, child in module.named_children():
        full = f"{prefix}.{name}" if prefix else name
        if type(child) is nn.Sequential:
            yield from _leaves(child, full)
        else:
            yield full, child


def homogeneity_degree(model: nn.Module, params: Mapping[str, Tensor] | None = None) -> int:
    """The degree m with f(gθ) = g^m f(θ) (g > 0), read from a bias-free ``nn.Sequential``.

    Every module must be a bias-free ``Linear``/``Conv1d-3d``/``NTKLinear`` or a
    degree-one map (ReLU, leaky ReLU, identity, flatten, max/average pooling, eval-mode
    dropout); m is the number of those layers whose weight is among the parameters θ (a layer
    left out of ``params`` is fixed and does not scale). Anything else raises
    :class:`~paramsym.errors.InvalidArgumentError` naming the module and asking for ``degree=``.

    >>> import paramsym as ps
    >>> homogeneity_degree(ps.mlp([3, 5, 5, 2], activation="relu", bias=False))
    3
    """
    point = resolve_trainable(model, params)
    advice = (
        "pass degree=m if you know that f(gθ) = g^m f(θ) for g > 0 (for a net with biases or "
        "normalisation layers, scale one layer at a time instead)"
    )
    if type(model) is not nn.Sequential:
        raise InvalidArgumentError(
            f"homogeneity_degree: cannot read the degree of a {type(model).__name__} (its "
            f"forward may do anything); the inference covers nn.Sequential only: {advice}"
        )
    degree = 0
    for name, module in _leaves(model, ""):
        if isinstance(module, _HOMOGENEOUS_LAYERS):
            if getattr(module, "bias", None) is not None:
                raise InvalidArgumentError(
                    f"homogeneity_degree: layer '{name}' ({type(module).__name__}) has a bias, "
                    f"so the net is not homogeneous in all its parameters; {advice}"
                )
            degree += int(f"{name}.weight" in point)
        elif not isinstance(module, _DEGREE_ONE_MAPS):
            raise InvalidArgumentError(
                f"homogeneity_degree: module '{name}' ({type(module).__name__}) is not a "
                f"bias-free linear layer or a positively homogeneous map of degree one; {advice}"
            )
    if degree == 0:
        raise InvalidArgumentError(
            "homogeneity_degree: no layer weight is among the parameters, so f does not scale "
            f"with θ; {advice}"
        )
    return degree


def resolve_degree(
    model: nn.Module, degree: int | None, params: Mapping[str, Tensor] | None
) -> int:
    if degree is None:
        return homogeneity_degree(model, params)
    if int(degree) != degree or degree < 1:
        raise InvalidArgumentError(f"degree must be a positive integer, got {degree!r}")
    return int(degree)


@dataclass
class EulerRelation(ApplicationResult):
    """⟨∇L, θ⟩ = m⟨∇ℓ(f), f⟩ at one point (item 1 of Theorem 1 for homogeneity, §4.2).

    Attributes:
        degree: m.
        lhs: ⟨∇L, θ⟩.
        rhs: m⟨∇ℓ(f), f⟩; under gradient flow d/dt ½‖θ‖² = −rhs.
        residual: |lhs − rhs| / (‖∇L‖‖θ‖ + m‖∇ℓ‖‖f‖).
        loss: L(θ).
    """

    degree: int
    lhs: float
    rhs: float
    residual: float
    loss: float

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ("residual",)


def euler_relation(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    degree: int | None = None,
    params: Mapping[str, Tensor] | None = None,
) -> EulerRelation:
    """The Euler relation ⟨∇L(θ), θ⟩ = m⟨∇ℓ(f), f⟩ of an m-homogeneous net (§4.2).

    Cost: one forward and one backward pass.

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)), f the stacked output ``model(x)`` (all samples).
        degree: m; ``None`` reads it from a bias-free ReLU/linear ``nn.Sequential``
            (:func:`homogeneity_degree`).
        params: θ (default: the model's trainable parameters).

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 1], activation="relu", bias=False, seed=0, dtype=torch.float64)
    >>> x, y = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 1, dtype=torch.float64)
    >>> result = euler_relation(model, torch.nn.MSELoss(), (x, y))
    >>> result.degree, result.holds(1e-12)
    (2, True)
    """
    m = resolve_degree(model, degree, params)
    stacked = StackedLoss(model, loss_fn, batch, params, where="euler_relation")
    gradient = flatten(stacked.gradient())
    theta = flatten(stacked.point)
    f, grad_ell = stacked.output, stacked.loss_gradient
    lhs = float(torch.dot(gradient, theta))
    rhs = m * float(torch.sum(grad_ell * f))
    scale = vector_norm(gradient) * vector_norm(theta) + m * vector_norm(grad_ell) * vector_norm(f)
    return EulerRelation(
        degree=m,
        lhs=lhs,
        rhs=rhs,
        residual=relative_residual(abs(lhs - rhs), scale),
        loss=float(stacked.loss),
    )


@dataclass
class HomogeneityHessian(ApplicationResult):
    """Eqs. (3) and (4) of seed 003 at one point.

    Attributes:
        degree: m.
        loss: L(θ).
        theta_norm: ‖θ‖.
        gradient_norm: ‖∇L‖.
        action_norm: ‖Hθ‖.
        action_residual: eq. (3), ‖Hθ − (m−1)∇L − m Fᵀ∇²ℓ f‖ / (‖Hθ‖ + |m−1|‖∇L‖ +
            m‖Fᵀ∇²ℓ f‖).
        gauss_newton_residual: the same identity as (H − G)θ = (m−1)∇L with Gθ = Fᵀ∇²ℓ(Fθ)
            from a JVP, scaled by ‖Hθ‖ + ‖Gθ‖ + |m−1|‖∇L‖.
        model_euler_residual: Fθ = m f (the model's own Euler relation, which turns one form
            into the other), ‖Fθ − m f‖ / (‖Fθ‖ + m‖f‖). A wrong degree shows here first.
        quadratic_lhs: θᵀHθ.
        quadratic_rhs: m² fᵀ∇²ℓ f + m(m−1)⟨∇ℓ, f⟩.
        quadratic_residual: eq. (4), |lhs − rhs| / (‖θ‖‖Hθ‖ + m²‖f‖‖∇²ℓ f‖ + m|m−1|‖∇ℓ‖‖f‖).
    """

    degree: int
    loss: float
    theta_norm: float
    gradient_norm: float
    action_norm: float
    action_residual: float
    gauss_newton_residual: float
    model_euler_residual: float
    quadratic_lhs: float
    quadratic_rhs: float
    quadratic_residual: float

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return (
            "action_residual",
            "gauss_newton_residual",
            "model_euler_residual",
            "quadratic_residual",
        )


def homogeneity_hessian(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    degree: int | None = None,
    params: Mapping[str, Tensor] | None = None,
) -> HomogeneityHessian:
    """Eq. (3) Hθ = (m−1)∇L + m Fᵀ∇²ℓ(f) f and eq. (4) θᵀHθ = m² fᵀ∇²ℓ f + m(m−1)⟨∇ℓ, f⟩.

    Matrix-free: one Hessian-vector product Hθ (reverse over reverse, ∇L from the same graph),
    one JVP Fθ, two output-space products ∇²ℓ·f and ∇²ℓ·Fθ (the output has n·d entries) and two
    VJPs. Shapes: θ, ∇L, Hθ have P entries; f, ∇ℓ have the output's shape ``(n, d)``.

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)) with f the stacked output.
        degree: m (``None``: :func:`homogeneity_degree`).
        params: θ (default: the model's trainable parameters).
    """
    m = resolve_degree(model, degree, params)
    stacked = StackedLoss(model, loss_fn, batch, params, where="homogeneity_hessian")
    point, f, grad_ell = stacked.point, stacked.output, stacked.loss_gradient
    operator = HessianOperator(model, loss_fn, batch, point)
    theta = flatten(point)
    gradient = flatten(operator.gradient)
    h_theta = flatten(operator.hvp(point))
    ell_f = stacked.loss_hvp(f)  # ∇²ℓ f
    gn_f = flatten(stacked.vjp(ell_f))  # Fᵀ∇²ℓ f
    f_theta = stacked.jvp(point)  # Fθ (= m f)
    gn_theta = flatten(stacked.vjp(stacked.loss_hvp(f_theta)))  # Gθ

    rhs3 = (m - 1) * gradient + m * gn_f
    action_scale = vector_norm(h_theta) + abs(m - 1) * vector_norm(gradient) + m * vector_norm(gn_f)
    gn_scale = vector_norm(h_theta) + vector_norm(gn_theta) + abs(m - 1) * vector_norm(gradient)
    quadratic_lhs = float(torch.dot(theta, h_theta))
    quadratic_rhs = m * m * float(torch.sum(f * ell_f)) + m * (m - 1) * float(
        torch.sum(grad_ell * f)
    )
    quadratic_scale = (
        vector_norm(theta) * vector_norm(h_theta)
        + m * m * vector_norm(f) * vector_norm(ell_f)
        + m * abs(m - 1) * vector_norm(grad_ell) * vector_norm(f)
    )
    return HomogeneityHessian(
        degree=m,
        loss=float(operator.loss),
        theta_norm=vector_norm(theta),
        gradient_norm=vector_norm(gradient),
        action_norm=vector_norm(h_theta),
        action_residual=relative_residual(vector_norm(h_theta - rhs3), action_scale),
        gauss_newton_residual=relative_residual(
            vector_norm(h_theta - gn_theta - (m - 1) * gradient), gn_scale
        ),
        model_euler_residual=relative_residual(
            vector_norm(f_theta - m * f), vector_norm(f_theta) + m * vector_norm(f)
        ),
        quadratic_lhs=quadratic_lhs,
        quadratic_rhs=quadratic_rhs,
        quadratic_residual=relative_residual(abs(quadratic_lhs - quadratic_rhs), quadratic_scale),
    )
