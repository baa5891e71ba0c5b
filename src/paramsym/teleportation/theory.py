"""Numerical checks of the teleportation theory of dissertation §4.5 (notes 001b §5).

* :func:`gradient_hessian_cosine`: at a maximiser of ‖∇L‖² on a level set, ∇L is an
  eigenvector of the Hessian (Lemma 4.5.10), so cos(∇L, H∇L) = ±1, and GD after such a
  teleport moves along Newton's direction (Prop 4.5.11): :func:`newton_cosine`.
* :func:`lie_bracket_identity`: for the reverse-gradient field R = −∇L and a field A = M∇L with
  M antisymmetric (so A ⟂ R), [A, R]L = −A f with f = ‖∇L‖² (Eq. 4.52). Both sides are
  computed by separate forward-mode derivatives: the bracket of the two vector fields, and
  the derivative of f along A.

These work on a flat parameter vector and use ``torch.func``; they are meant for small models
and test functions (the Newton check forms the dense Hessian).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from paramsym.core.params import flatten, functional_call, resolve_params, unflatten
from paramsym.errors import ShapeError
from paramsym.teleportation.objectives import Batch, LossFn


def _flat_loss(
    model: nn.Module, loss_fn: LossFn, batch: Batch, like: Mapping[str, Tensor]
) -> Callable[[Tensor], Tensor]:
    def loss(w: Tensor) -> Tensor:
        return loss_fn(functional_call(model, unflatten(w, like), batch[0]), batch[1]).reshape(())

    return loss


def _flat_loss_and_gradient(
    model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor] | None
) -> tuple[Callable[[Tensor], Tensor], Tensor, Tensor]:
    """The loss as a function of the flat parameters, the flat point and ∇L there."""
    point = resolve_params(model, params)
    loss = _flat_loss(model, loss_fn, batch, point)
    w = flatten(point)
    return loss, w, torch.func.grad(loss)(w)


def _cosine(a: Tensor, b: Tensor) -> float:
    return float(a @ b / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b)))


def gradient_hessian_cosine(
    model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor] | None = None
) -> float:
    """cos(∇L, H∇L): ±1 exactly when ∇L is a Hessian eigenvector (Lemma 4.5.10)."""
    loss, w, g = _flat_loss_and_gradient(model, loss_fn, batch, params)
    hg = torch.func.jvp(torch.func.grad(loss), (w,), (g,))[1]
    return _cosine(g, hg)


def newton_cosine(
    model: nn.Module, loss_fn: LossFn, batch: Batch, params: Mapping[str, Tensor] | None = None
) -> float:
    """cos(∇L, H⁻¹∇L) with the dense Hessian: ±1 on Newton's direction (Prop 4.5.11)."""
    loss, w, g = _flat_loss_and_gradient(model, loss_fn, batch, params)
    hessian = torch.func.hessian(loss)(w)
    return _cosine(g, torch.linalg.solve(hessian, g))


def lie_bracket_identity(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    antisymmetric: Tensor,
    params: Mapping[str, Tensor] | None = None,
) -> tuple[float, float]:
    """``([A, R]L, −A f)`` at θ for A = M∇L, R = −∇L, f = ‖∇L‖² (Eq. 4.52); equal in theory.

    Args:
        antisymmetric: M, shape (P, P), with M = −Mᵀ.
    """
    point = resolve_params(model, params)
    w = flatten(point)
    size = w.numel()
    if antisymmetric.shape != (size, size):
        raise ShapeError(
            f"lie_bracket_identity: M must have shape ({size}, {size}), got "
            f"{tuple(antisymmetric.shape)}"
        )
    matrix = antisymmetric.to(dtype=w.dtype, device=w.device)
    loss = _flat_loss(model, loss_fn, batch, point)
    gradient = torch.func.grad(loss)

    def reverse(v: Tensor) -> Tensor:  # R
        return -gradient(v)

    def along(v: Tensor) -> Tensor:  # A
        return matrix @ gradient(v)

    def f(v: Tensor) -> Tensor:
        g = gradient(v)
        return g @ g

    a, r = along(w), reverse(w)
    bracket = torch.func.jvp(reverse, (w,), (a,))[1] - torch.func.jvp(along, (w,), (r,))[1]
    lhs = float(bracket @ gradient(w))  # [A, R] applied to L
    rhs = -float(torch.func.jvp(f, (w,), (a,))[1])  # −A f
    return lhs, rhs
