"""The pieces of Theorem 1 that depend on one side of the equivariance (T on the parameters or
S on the outputs), and the operator-norm estimates of the residual scale.

* :class:`Side`: J = A⁻¹B and a = A⁻ᵀ∇L (or K and c) and the item-2a term of that side;
* :class:`SecondDerivatives`: the second derivatives of T (or S) that item 2b and the
  consistency identity contract with a (or c), with their norms for the residual scale;
* :func:`operator_estimates`: ‖Hv‖, ‖Fᵀw‖, ‖∇²ℓw‖ for random unit v, w.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from paramsym.core.params import Params, flatten, unflatten
from paramsym.equivariance.forward import GraphPoint
from paramsym.equivariance.jacobians import (
    Solved,
    covector_gradient,
    g_jacobian,
    second_derivatives,
    solve,
)
from paramsym.equivariance.result import norm

FlatMap = Callable[[Tensor, Tensor], Tensor]


def rows(vectors: list[Tensor]) -> Tensor:
    """Stack k vectors into (k, n) rows (a view, not a copy, for k = 1)."""
    return vectors[0].unsqueeze(0) if len(vectors) == 1 else torch.stack(vectors)


class Side:
    """One side of the equivariance (T on parameters, or S on outputs): the solution of
    M X = ∂_g fn and Mᵀ cov = covector (J and a, or K and c), and the item-2a term
    ``sign · ∇_z⟨cov, ∂fn(z, g)[X_j, −e_j]⟩`` (sign +1 for T, −1 for S: notes 003 §5 item 3).

    At g₀ (method ``"identity"``) M = I for every z, so X_j = ∂_g fn(z, g₀) e_j and the term is
    ``−sign · ∇_z⟨cov, X_j(z)⟩``: both come from one double-backward pass per generator
    (:func:`_generators_and_pullbacks`), or, for T with a closed-form ``tangent`` (the
    generators of an :class:`Equivariance`), from that closed form and one backward pass
    through it. Elsewhere J and K come from :func:`~paramsym.equivariance.jacobians.solve` and
    the term from :func:`~paramsym.equivariance.jacobians.covector_gradient`.
    """

    def __init__(
        self,
        fn: Callable[[Tensor, Tensor], Tensor],
        point: Params | Tensor,
        g: Tensor,
        covector: Tensor,
        *,
        method: str,
        what: str,
        sign: float,
        tangent: Callable[[Params, Tensor], Params] | None = None,
        dict_map: Callable[[Params, Tensor], Params] | None = None,
    ) -> None:
        self.fn, self.g, self.sign, self.point = fn, g, sign, point
        self.eye = torch.eye(g.numel(), dtype=g.dtype, device=g.device)
        self.rates: list[Tensor] = []
        self.leaves: list[Tensor] = []
        self.pulled: list[Tensor] = []
        if method == "identity":
            if tangent is not None and isinstance(point, Mapping):
                with torch.enable_grad():  # the closed form, kept with its graph for term()
                    leaves = {n: t.detach().requires_grad_(True) for n, t in point.items()}
                    self.rates = [flatten(tangent(leaves, e)) for e in self.eye]
                    self.leaves = list(leaves.values())
                directions = rows([rate.detach() for rate in self.rates])
            else:
                columns, self.pulled = _generators_and_pullbacks(fn, dict_map, point, g, covector)
                directions = rows(columns)
            self.solved = Solved(directions, covector, "identity")
        else:
            z = self.z
            self.solved = solve(
                fn, z, g, g_jacobian(fn, z, g).detach(), covector, method=method, what=what
            )

    @property
    def z(self) -> Tensor:
        """The point as a flat vector."""
        return flatten(self.point) if isinstance(self.point, Mapping) else self.point

    def term(self, j: int) -> Tensor:
        cov = self.solved.covector
        if self.pulled:
            pulled = self.pulled[j]
            return -pulled if self.sign > 0 else pulled
        if not self.rates:
            direction = (self.solved.columns[j], -self.eye[j])
            return self.sign * covector_gradient(self.fn, self.z, self.g, cov, direction).detach()
        rate = self.rates[j]
        if not rate.requires_grad:  # the generator does not depend on z (a translation)
            return torch.zeros_like(cov)
        with torch.enable_grad():
            grads = torch.autograd.grad(
                rate, self.leaves, grad_outputs=cov, allow_unused=True, materialize_grads=True
            )
        pulled = torch.cat([t.reshape(-1) for t in grads])
        return pulled.detach().neg_() if self.sign > 0 else pulled.detach()


def _generators_and_pullbacks(
    fn: FlatMap,
    dict_map: Callable[[Params, Tensor], Params] | None,
    point: Params | Tensor,
    g: Tensor,
    covector: Tensor,
) -> tuple[list[Tensor], list[Tensor]]:
    """At g₀: the columns X_j = ∂_g fn(z, g₀) e_j and the pullbacks ∇_z⟨cov, X_j(z)⟩, by the
    double-backward trick, with reverse-mode operations only.

    s(z, w) = ∂_g⟨w, fn(z, g)⟩ at g₀ (one backward pass with its graph) is Bᵀw; one more
    backward pass of s_j gives ∂s_j/∂w = X_j and, at w = cov, ∂s_j/∂z = ∇_z⟨cov, X_j(z)⟩. Both
    come from that one pass per generator; no forward mode (eager forward-mode products of a
    large tensor by a dual scalar go through slow decompositions in torch 2.13).
    """
    k = g.numel()
    gg = g.detach().requires_grad_(True)
    with torch.enable_grad():
        if isinstance(point, Mapping):
            assert dict_map is not None
            leaves = {n: t.detach().requires_grad_(True) for n, t in point.items()}
            weights = {
                n: t.detach().requires_grad_(True) for n, t in unflatten(covector, point).items()
            }
            image = dict_map(leaves, gg)
            outputs = [image[n] for n in leaves]
            w_list, z_list = list(weights.values()), list(leaves.values())
        else:
            leaf = point.detach().requires_grad_(True)
            weight = covector.detach().requires_grad_(True)
            outputs, w_list, z_list = [fn(leaf, gg)], [weight], [leaf]
        (s,) = torch.autograd.grad(
            outputs,
            gg,
            grad_outputs=w_list,
            create_graph=True,
            allow_unused=True,
            materialize_grads=True,
        )
        columns: list[Tensor] = []
        pulled: list[Tensor] = []
        for j in range(k):
            if not s.requires_grad:  # fn does not depend on g
                grads: tuple[Tensor, ...] = tuple(torch.zeros_like(t) for t in w_list + z_list)
            else:
                grads = torch.autograd.grad(
                    s[j],
                    w_list + z_list,
                    retain_graph=j < k - 1,
                    allow_unused=True,
                    materialize_grads=True,
                )
            columns.append(torch.cat([t.detach().reshape(-1) for t in grads[: len(w_list)]]))
            pulled.append(torch.cat([t.detach().reshape(-1) for t in grads[len(w_list) :]]))
    return columns, pulled


def operator_estimates(
    point: GraphPoint,
    params: Params,
    y0: Tensor,
    hess_l: Callable[[Tensor], Tensor] | None,
    generator: torch.Generator,
    hessian_norm: float | None,
) -> tuple[float, float, float]:
    """‖Hv‖, ‖Fᵀw‖ and ‖∇²ℓ w‖ for random unit v, w: estimates of ‖H‖, ‖F‖, ‖∇²ℓ‖ from below
    (within a factor about √P of the spectral norm), which do not vanish by cancellation."""

    def unit(size: int, like: Tensor) -> Tensor:
        v = torch.randn(size, generator=generator, dtype=like.dtype).to(like.device)
        return v / torch.linalg.vector_norm(v)

    z = flatten(params)
    h = (
        hessian_norm
        if hessian_norm is not None
        else norm(point.hvp(unflatten(unit(z.numel(), z), params)))
    )
    if hess_l is None:
        return h, 0.0, 0.0
    w = unit(y0.numel(), y0)
    return h, norm(point.output_vjp(w.reshape(y0.shape))), norm(hess_l(w))


class SecondDerivatives:
    """Second directional derivatives ∂²fn[u_i, w_j] contracted with a covector, with norms,
    computed on demand and cached (the 2b/consistency ingredients for T or S)."""

    def __init__(
        self,
        fn: Callable[[Tensor, Tensor], Tensor],
        z: Tensor,
        g: Tensor,
        directions: Tensor,
        covector: Tensor,
    ) -> None:
        self.fn, self.z, self.g, self.covector = fn, z, g, covector
        self.directions = directions  # (k, n): J or K
        self.cache: dict[str, tuple[Tensor, Tensor]] = {}

    def get(self, kind: str) -> tuple[Tensor, Tensor]:
        """``(⟨covector, ∂²fn[·, ·]⟩, ‖∂²fn[·, ·]‖)``, both (k, k), for kind ``"zz"`` (u_i = w_i
        = directions), ``"gg"`` (e_i, e_j) or ``"zg"`` (directions_i, e_j)."""
        if kind not in self.cache:
            tensor = second_derivatives(self.fn, self.z, self.g, self.directions, kind).detach()
            contracted = torch.einsum("n,nij->ij", self.covector, tensor)
            self.cache[kind] = (contracted, torch.linalg.vector_norm(tensor, dim=0))
        return self.cache[kind]
