"""The loss as a function of the stacked output, and the residual convention of the applications.

Seed 003 writes every identity for L(θ) = ℓ(f(θ)) with ``f: R^P → R^d`` and the data absorbed
into f: for a batch of n samples, f(θ) is the *stacked* output of all of them (the tensor
``model(x)`` of shape ``(n, d_out)``, seen as one vector of length n·d_out) and ℓ(y) =
``loss_fn(y, targets)`` is the loss as a function of that whole tensor (with ``reduction="mean"``
its gradient carries the 1/n). :class:`StackedLoss` gives the pieces the applications combine,
all matrix-free:

* f, ∇ℓ(f) (shape of the output) and ℓ(f);
* ``jvp(v) = F v`` (forward mode through the model), ``vjp(w) = Fᵀ w`` (one reverse pass on the
  saved forward), with F = ∂f/∂θ of shape ``(n·d, P)``;
* ``loss_hvp(u) = ∇²ℓ(f) u`` in output space (reverse-over-reverse on the small output vector;
  works for every loss, including ``nn.MSELoss`` that forward-over-reverse cannot push a tangent
  through).

**Residual scale** (note 003 §5b). An identity lhs = rhs is reported as
``‖lhs − rhs‖ / scale`` with *scale* the sum over the identity's terms of the products of their
factors' norms, and 0/0 := 0 (:func:`relative_residual`). Never the terms' values: a symmetry's
first-order identity has both sides ≈ 0. The factors are measured as follows:

* vectors (θ, ∇L, ∇ℓ, f) by their Euclidean norm; explicit matrices (E, G, A, O) by their
  spectral norm; a scalar contraction ⟨a, b⟩ by ‖a‖‖b‖;
* a curvature operator applied to a vector (Hθ, Fᵀ∇²ℓ f, ∇²ℓ(Ef)) by the norm of the product,
  which is never larger than ‖operator‖·‖vector‖ (so the residual is never smaller than with
  the operator norm), and which does not vanish by cancellation between the identity's terms;
* except where the identity says that such a product vanishes (HJ = 0 at a stationary point,
  the off-block part of H at a mirror point): there the Hessian counts with an estimate of its
  spectral norm ‖H‖ (:func:`hessian_norm_estimate`, or the eigenvalues computed anyway).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.model_checks import check_deterministic, check_input_dtype, require_module
from paramsym.core.params import Params, check_finite, functional_call, resolve_trainable
from paramsym.curvature import lanczos
from paramsym.equivariance.forward import scalar_loss, unpack_batch
from paramsym.errors import InvalidArgumentError, NotConvergedWarning

LossFn = Callable[[Tensor, Tensor], Tensor]
Batch = tuple[Any, Tensor]


def relative_residual(difference: float, scale: float) -> float:
    """``difference / scale`` with 0/0 := 0 (and ``inf`` for a nonzero difference over 0)."""
    if scale == 0.0:
        return 0.0 if difference == 0.0 else math.inf
    return difference / scale


def spectral_norm(matrix: Tensor) -> float:
    """‖M‖₂ of an explicit matrix (largest singular value; 0 for an empty matrix)."""
    if matrix.numel() == 0:
        return 0.0
    return float(torch.linalg.matrix_norm(matrix.to(torch.float64), ord=2))


def hessian_norm_estimate(
    matvec: Callable[[Tensor], Tensor], size: int, *, dtype: torch.dtype, steps: int = 20
) -> float:
    """An estimate of ‖H‖₂ = max|λ| from at most ``steps`` Lanczos products (seeded start).

    A Ritz value never exceeds the spectral radius, so this is a lower bound, accurate to a few
    digits after 20 steps on the spectra of network Hessians; it is only used as the scale of a
    residual (a smaller scale reports a larger residual, never a smaller one), so the run is not
    required to converge and its :class:`~paramsym.errors.NotConvergedWarning` is not raised.
    """
    if size == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotConvergedWarning)
        result = lanczos(
            matvec, size, 1, which="magnitude", tol=1e-3, max_iter=min(size, steps), dtype=dtype
        )
    return abs(result.eigenvalues[0])


class StackedLoss:
    """L(θ) = ℓ(f(θ)) at one point, with f the stacked output of a batch (see the module).

    Args:
        model: the network; its forward must return one tensor.
        loss_fn: ``loss_fn(output, target) -> scalar``.
        batch: ``(x, y)``.
        params: the point θ (default: the model's trainable parameters).
        where: the calling function's name, for error messages.

    Attributes:
        point: θ as a params dict (detached).
        output: f(θ), shape of ``model(x)`` (e.g. ``(n, d)``).
        loss: ℓ(f(θ)), a 0-d tensor.
        loss_gradient: ∇ℓ(f), shape of ``output``.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        batch: Batch,
        params: Mapping[str, Tensor] | None = None,
        *,
        where: str = "StackedLoss",
    ) -> None:
        require_module(model, where)
        check_deterministic(model, where)
        x, target = unpack_batch(batch, where)
        self.point: Params = {k: t.detach() for k, t in resolve_trainable(model, params).items()}
        if not self.point:
            raise InvalidArgumentError(f"{where}: the model has no trainable parameters")
        check_finite(self.point, f"{where}: params")
        dtype = next(iter(self.point.values())).dtype
        check_input_dtype(x, dtype, where, "the batch's inputs")
        self._model, self._x, self._target, self._loss_fn = model, x, target, loss_fn
        self._where = where
        with differentiable_attention(self._model):
            pair = torch.func.vjp(self._forward, self.point)
        output, self._pullback = pair[0], pair[1]
        if not isinstance(output, Tensor):
            raise InvalidArgumentError(
                f"{where}: the model's forward must return one tensor, got {type(output).__name__}"
            )
        self.output = output.detach()
        self._leaf = self.output.clone().requires_grad_(True)
        with torch.enable_grad():
            loss = scalar_loss(loss_fn, self._leaf, target, where)
            (grad,) = torch.autograd.grad(loss, self._leaf, create_graph=True)
        self.loss = loss.detach()
        self.loss_gradient = grad.detach()
        self._grad = grad

    def _forward(self, params: Params) -> Tensor:
        return functional_call(self._model, params, self._x)

    def loss_of(self, output: Tensor) -> Tensor:
        """ℓ(y) for another stacked output y (0-d tensor)."""
        return scalar_loss(self._loss_fn, output, self._target, self._where)

    def vjp(self, w: Tensor) -> Params:
        """Fᵀ w for ``w`` shaped like the output: a params dict."""
        (product,) = self._pullback(w.to(self.output.dtype))
        return {k: t.detach() for k, t in product.items()}

    def jvp(self, v: Mapping[str, Tensor]) -> Tensor:
        """F v for a params dict ``v``: a tensor shaped like the output (forward mode)."""
        with differentiable_attention(self._model):
            tangent = torch.func.jvp(self._forward, (self.point,), (dict(v),))[1]
        return tangent.detach()

    def loss_hvp(self, u: Tensor) -> Tensor:
        """∇²ℓ(f) u in output space, for ``u`` shaped like the output."""
        if not self._grad.requires_grad:  # ℓ is affine in y
            return torch.zeros_like(self.output)
        with torch.enable_grad():
            (product,) = torch.autograd.grad(
                self._grad, self._leaf, grad_outputs=u.to(self.output.dtype), retain_graph=True
            )
        return product.detach()

    def gradient(self) -> Params:
        """∇L(θ) = Fᵀ∇ℓ(f) as a params dict (one reverse pass)."""
        return self.vjp(self.loss_gradient)


def vector_norm(t: Tensor) -> float:
    """Euclidean norm of a tensor seen as one vector, as a float."""
    return float(torch.linalg.vector_norm(t.detach().to(torch.float64)))


@dataclass
class ApplicationResult:
    """Base of the results that check identities: ``residuals`` and ``holds(tol)``.

    Subclasses list their residual fields in ``_residual_fields``; a residual that does not
    apply (e.g. the d = 1 collinearity on a batch of several samples) is ``None`` and is left
    out of :attr:`residuals`.
    """

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return ()

    @property
    def residuals(self) -> dict[str, float]:
        """Identity name → relative residual (see the module docstring for the scale)."""
        out: dict[str, float] = {}
        for name in self._residual_fields:
            value = getattr(self, name)
            if isinstance(value, list):
                out.update({f"{name}[{i}]": float(v) for i, v in enumerate(value)})
            elif value is not None:
                out[name] = float(value)
        return out

    def holds(self, tol: float = 1e-9) -> bool:
        """Whether every applicable residual is at most ``tol``."""
        return all(value <= tol for value in self.residuals.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain-number fields, for JSON."""
        return asdict(self)
