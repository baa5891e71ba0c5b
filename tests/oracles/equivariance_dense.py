"""Dense index-form oracle for seed 003's identities (notes 003 §2), for small models.

Everything is built from dense Jacobians and Hessians of the flattened maps (the model's by
``torch.autograd.functional``, those of T, S and ℓ by ``torch.func``): F
(d × P), H (P × P), A, B, C, D, the third-order tensors T_{p,qs}, T_{p,qj}, T_{p,ij} and their S
analogues, and the identities are evaluated in the index form the note writes them in (not the
compact form :func:`paramsym.check_identities` uses). Shapes match ``IdentityResult``: item 1
``(k,)``, item 2a ``(k, P)``, items 2b and consistency ``(k, k)``.
"""

# ruff: noqa: N802, N815  (F, H, L, T, S, grad_L: the paper's names)
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

import paramsym as ps

jacfwd = torch.func.jacfwd
autograd_jacobian = torch.autograd.functional.jacobian
autograd_hessian = torch.autograd.functional.hessian


@dataclass
class Dense:
    F: Tensor
    H: Tensor
    grad_L: Tensor
    grad_l: Tensor
    hess_l: Tensor
    A: Tensor
    J: Tensor
    C: Tensor
    K: Tensor
    a: Tensor
    c: Tensor
    lhs: dict[str, Tensor]
    rhs: dict[str, Tensor]


def dense_theorem1(model, loss_fn, batch, eq, g, params=None) -> Dense:
    params = {k: v.detach() for k, v in (params or dict(model.named_parameters())).items()}
    x, target = batch
    z0 = ps.flatten(params)
    shape = ps.functional_call(model, params, x).shape

    def f(z):
        return ps.functional_call(model, ps.unflatten(z, params), x).reshape(-1)

    def ell(y):
        return loss_fn(y.reshape(shape), target)

    def L(z):
        return ell(f(z))

    def T(z, h):
        return ps.flatten(eq.apply(ps.unflatten(z, params), h))

    def S(y, h):
        return eq.apply_output(y.reshape(shape), h).reshape(-1)

    y0 = f(z0).detach()
    # the model's derivatives by torch.autograd: torch.func's second derivatives through
    # layer_norm/batch_norm are wrong in torch 2.13 (pytorch/pytorch#196700, #196699)
    F = autograd_jacobian(f, z0)
    H = autograd_hessian(L, z0)
    grad_L = autograd_jacobian(L, z0)
    grad_l = torch.func.grad(ell)(y0)
    hess_l = torch.func.hessian(ell)(y0)
    A = jacfwd(T, argnums=0)(z0, g)
    B = jacfwd(T, argnums=1)(z0, g)
    C = jacfwd(S, argnums=0)(y0, g)
    D = jacfwd(S, argnums=1)(y0, g)
    J = torch.linalg.solve(A, B)
    K = torch.linalg.solve(C, D)
    a = torch.linalg.solve(A.T, grad_L)
    c = torch.linalg.solve(C.T, grad_l)
    T_qs = jacfwd(jacfwd(T, argnums=0), argnums=0)(z0, g)  # [p, q, s]
    T_qj = jacfwd(jacfwd(T, argnums=0), argnums=1)(z0, g)  # [p, q, j]
    T_ij = jacfwd(jacfwd(T, argnums=1), argnums=1)(z0, g)  # [p, i, j]
    S_be = jacfwd(jacfwd(S, argnums=0), argnums=0)(y0, g)
    S_bj = jacfwd(jacfwd(S, argnums=0), argnums=1)(y0, g)
    S_ij = jacfwd(jacfwd(S, argnums=1), argnums=1)(y0, g)
    ein = torch.einsum
    lhs: dict[str, Tensor] = {}
    rhs: dict[str, Tensor] = {}
    lhs["item1"], rhs["item1"] = J.T @ grad_L, K.T @ grad_l
    # item 2a, index form of notes 003 §2
    rhs_2a = (
        F.T @ hess_l @ K
        + ein("p,pqs,sj->qj", a, T_qs, J)
        - ein("p,pqj->qj", a, T_qj)
        + ein("a,abj,bq->qj", c, S_bj, F)
        - ein("a,abe,bq,ej->qj", c, S_be, F, K)
    )
    lhs["item2a"], rhs["item2a"] = (H @ J).T, rhs_2a.T
    jhj = J.T @ H @ J
    common = (
        K.T @ hess_l @ K
        - ein("a,abe,bi,ej->ij", c, S_be, K, K)
        + ein("p,pqs,qi,sj->ij", a, T_qs, J, J)
    )
    lhs["item2b_gg"] = jhj
    rhs["item2b_gg"] = common + ein("a,aij->ij", c, S_ij) - ein("p,pij->ij", a, T_ij)
    lhs["item2b_mixed"] = jhj
    rhs["item2b_mixed"] = common + ein("a,abj,bi->ij", c, S_bj, K) - ein("p,pqj,qi->ij", a, T_qj, J)
    lhs["consistency"] = ein("p,pij->ij", a, T_ij) - ein("p,pqj,qi->ij", a, T_qj, J)
    rhs["consistency"] = ein("a,aij->ij", c, S_ij) - ein("a,abj,bi->ij", c, S_bj, K)
    return Dense(F, H, grad_L, grad_l, hess_l, A, J, C, K, a, c, lhs, rhs)


def dense_hessian(model, loss_fn, batch, params) -> tuple[Tensor, Tensor]:
    """(∇L, H) of the flattened loss, by ``torch.func``."""
    x, target = batch

    def L(z):
        return loss_fn(ps.functional_call(model, ps.unflatten(z, params), x), target)

    z0 = ps.flatten(params)
    return autograd_jacobian(L, z0), autograd_hessian(L, z0)
