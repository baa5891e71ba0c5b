"""Derivatives of T and S, and the characteristic directions J = A⁻¹B and outputs K = C⁻¹D.

Notation of seed 003 §3 (notes 003 §2): A = ∂_θT(θ, g) (P × P), B = ∂_gT(θ, g) (P × k),
C = ∂_yS(y, g) (d × d), D = ∂_gS(y, g) (d × k); J = A⁻¹B, K = C⁻¹D, and the frozen covectors
a = A⁻ᵀ∇L(θ), c = C⁻ᵀ∇ℓ(y). Only T and S are differentiated here (cheap maps of the
parameters and of the output; the model never is): single JVPs with eager dual tensors
(``torch.autograd.forward_ad``, several times cheaper than ``torch.func.jvp`` on a map of a
large parameter vector), their gradients by reverse-over-forward ``torch.autograd``, dense
Jacobians and second derivatives by vmapped ``torch.func.jacfwd``.

Solvers (``solver=``) for the linear systems A J = B, Aᵀa = ∇L (and C K = D, Cᵀc = ∇ℓ):

``"auto"``
    ``"identity"`` at g = g₀ (there A = I and C = I, so J = ∂_gT(θ, g₀) costs k JVPs of T, or
    k calls of the closed-form ``Equivariance.tangent``);
    elsewhere ``"direct"`` for systems of size ≤ :data:`DIRECT_MAX` and ``"gmres"`` above.
``"direct"``
    the dense matrix by forward-mode autodiff (``torch.func.jacfwd``, n JVPs), an LU
    factorisation and LAPACK's condition estimate (``gecon``): a reciprocal condition number
    below ``1e3 · n · eps`` raises :class:`~paramsym.errors.NotAGoodPositionError`.
``"gmres"``
    SciPy's GMRES, matrix-free (a JVP of T per product, a VJP for the transposed system) at a
    relative tolerance far below the identity check's (1e-13 in float64). A is not symmetric,
    so conjugate gradients is never used: notes 003 §5b measured CG returning a J 2% off on a
    small curved example. Non-convergence raises :class:`~paramsym.errors.NotAGoodPositionError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy.linalg
import scipy.sparse.linalg
import torch
from torch import Tensor
from torch.autograd import forward_ad

from paramsym.errors import InvalidArgumentError, NotAGoodPositionError

Solver = Literal["auto", "direct", "gmres"]
SOLVERS = ("auto", "direct", "gmres")
DIRECT_MAX = 2000
"""Largest system ``"auto"`` solves densely (P × P entries in memory, O(P³) time)."""

FlatMap = Callable[[Tensor, Tensor], Tensor]
"""A map (z, g) -> z' on flat vectors: T on flattened parameters, or S on flattened outputs."""


@dataclass
class Solved:
    """Solution of M X = R (columns of R, shape ``(k, n)``) and Mᵀ z = w, and how it was found.

    Attributes:
        columns: X, shape ``(k, n)`` (row j solves M x = R[j]).
        covector: z, shape ``(n,)``.
        method: ``"identity"``, ``"direct"`` or ``"gmres"``.
        rcond: LAPACK's reciprocal 1-norm condition estimate (``"direct"``), else ``None``.
    """

    columns: Tensor
    covector: Tensor
    method: str
    rcond: float | None = None


def check_solver(solver: str) -> None:
    if solver not in SOLVERS:
        raise InvalidArgumentError(
            f"check_identities: solver must be one of {SOLVERS}, got {solver!r}"
        )


def _tangent(out: Tensor) -> Tensor:
    tangent = forward_ad.unpack_dual(out).tangent
    return torch.zeros_like(out) if tangent is None else tangent


def jvp(fn: FlatMap, z: Tensor, g: Tensor, dz: Tensor | None, dg: Tensor | None) -> Tensor:
    """∂fn(z, g)[dz, dg]: one forward-mode product with eager dual tensors
    (``torch.autograd.forward_ad``, several times cheaper than ``torch.func.jvp`` on a cheap
    map of a large parameter vector); ``None`` holds an argument constant."""
    with forward_ad.dual_level():
        zz = z if dz is None else forward_ad.make_dual(z, dz)
        gg = g if dg is None else forward_ad.make_dual(g, dg)
        return _tangent(fn(zz, gg))


def func_jvp(fn: FlatMap, z: Tensor, g: Tensor, dz: Tensor, dg: Tensor) -> Tensor:
    """∂fn(z, g)[dz, dg] with ``torch.func.jvp`` (composable: used for nested derivatives)."""
    return torch.func.jvp(fn, (z, g), (dz, dg))[1]


def z_jvp(fn: FlatMap, z: Tensor, g: Tensor, dz: Tensor) -> Tensor:
    """∂_z fn(z, g)[dz] with g held constant."""
    return jvp(fn, z, g, dz, None)


def g_jacobian(fn: FlatMap, z: Tensor, g: Tensor) -> Tensor:
    """``∂_g fn(z, g)`` as rows: shape ``(k, n)``, row j = ∂fn/∂g_j (B or D, transposed): k
    forward-mode products."""
    eye = torch.eye(g.numel(), dtype=g.dtype, device=g.device)
    return torch.stack([jvp(fn, z, g, None, e) for e in eye])


def dense_jacobian(fn: FlatMap, z: Tensor, g: Tensor) -> Tensor:
    """``∂_z fn(z, g)``, shape ``(n, n)``, by forward mode (vmapped; looped if vmap fails)."""
    try:
        return torch.func.jacfwd(lambda u: fn(u, g))(z)
    except RuntimeError:  # an operation without a batching rule: one JVP per column
        eye = torch.eye(z.numel(), dtype=z.dtype, device=z.device)
        return torch.stack([z_jvp(fn, z, g, eye[i]) for i in range(z.numel())], dim=1)


def solve(
    fn: FlatMap,
    z: Tensor,
    g: Tensor,
    rhs: Tensor,
    covector: Tensor,
    *,
    method: str,
    what: str,
) -> Solved:
    """Solve M x_j = rhs[j] and Mᵀ c = covector, with M = ∂_z fn(z, g) (A or C).

    ``method`` is ``"identity"`` (M = I is known), ``"direct"`` or ``"gmres"``; ``what`` names
    the matrix in error messages (e.g. ``"A = ∂_θT(θ, g)"``).
    """
    if method == "identity":
        return Solved(rhs, covector, "identity")
    if method == "direct":
        return _solve_direct(fn, z, g, rhs, covector, what)
    if method == "gmres":
        return _solve_gmres(fn, z, g, rhs, covector, what)
    raise InvalidArgumentError(f"unknown solve method {method!r}")


def _singular(what: str, detail: str) -> NotAGoodPositionError:
    return NotAGoodPositionError(
        f"not a good position: {what} is singular ({detail}), so J = A⁻¹B / K = C⁻¹D is not "
        "defined there (seed 003, Def. 1); evaluate the identities at another g (g₀ is always "
        "good) or check the transformation"
    )


def _solve_direct(
    fn: FlatMap, z: Tensor, g: Tensor, rhs: Tensor, covector: Tensor, what: str
) -> Solved:
    n = z.numel()
    matrix = dense_jacobian(fn, z, g).detach()
    if not bool(torch.isfinite(matrix).all()):
        raise _singular(what, "it has NaN or infinite entries")
    lu, pivots, info = torch.linalg.lu_factor_ex(matrix)
    if int(info) != 0:
        raise _singular(what, f"exactly, LU pivot {int(info)} is zero")
    lu_np = lu.cpu().numpy()
    (gecon,) = scipy.linalg.lapack.get_lapack_funcs(("gecon",), (lu_np,))
    anorm = float(torch.linalg.matrix_norm(matrix, ord=1))
    rcond = float(gecon(lu_np, anorm, norm="1")[0])
    eps = torch.finfo(z.dtype).eps
    if not rcond >= 1e3 * n * eps:
        raise _singular(what, f"reciprocal condition number {rcond:.2e} < 1e3·n·eps")
    columns = torch.linalg.lu_solve(lu, pivots, rhs.detach().T).T
    cov = torch.linalg.lu_solve(lu, pivots, covector.detach().reshape(-1, 1), adjoint=True)
    return Solved(columns.contiguous(), cov.reshape(-1), "direct", rcond)


def _gmres_tolerance(dtype: torch.dtype) -> float:
    return max(1e-13, 10 * torch.finfo(dtype).eps)


def _solve_gmres(
    fn: FlatMap, z: Tensor, g: Tensor, rhs: Tensor, covector: Tensor, what: str
) -> Solved:
    n = z.numel()
    dtype, device = z.dtype, z.device
    z0 = z.detach()

    def to_torch(v: np.ndarray) -> Tensor:
        return torch.as_tensor(np.asarray(v).reshape(-1), device=device).to(dtype)

    def matvec(v: np.ndarray) -> np.ndarray:
        return z_jvp(fn, z0, g, to_torch(v)).detach().double().cpu().numpy()

    pullback = torch.func.vjp(lambda u: fn(u, g), z0)[1]

    def rmatvec(v: np.ndarray) -> np.ndarray:
        return pullback(to_torch(v))[0].detach().double().cpu().numpy()

    forward = scipy.sparse.linalg.LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    adjoint = scipy.sparse.linalg.LinearOperator((n, n), matvec=rmatvec, dtype=np.float64)
    rtol = _gmres_tolerance(dtype)
    restart = min(n, 100)
    maxiter = max(20, 10 * math.ceil(n / restart))

    def run(op: scipy.sparse.linalg.LinearOperator, b: Tensor, label: str) -> Tensor:
        b_np = b.detach().double().cpu().numpy()
        b_norm = float(np.linalg.norm(b_np))
        if b_norm == 0.0:
            return torch.zeros(n, dtype=dtype, device=device)
        x, _ = scipy.sparse.linalg.gmres(
            op, b_np, rtol=rtol, atol=0.0, restart=restart, maxiter=maxiter
        )
        residual = float(np.linalg.norm(op.matvec(x) - b_np)) / b_norm
        if not (np.all(np.isfinite(x)) and residual <= 100 * rtol):
            raise NotAGoodPositionError(
                f"not a good position: GMRES on {label} stopped at relative residual "
                f"{residual:.2e} (wanted {rtol:.0e}); {what} is singular or badly conditioned "
                "here, so J = A⁻¹B / K = C⁻¹D is not defined to the accuracy the check needs "
                "(seed 003, Def. 1); try solver='direct' for a condition estimate or another g"
            )
        return to_torch(x)

    columns = torch.stack([run(forward, rhs[j], f"{what} x = column {j}") for j in range(len(rhs))])
    cov = run(adjoint, covector, f"the transpose of {what}")
    return Solved(columns, cov, "gmres")


def pick_method(solver: str, at_identity: bool, size: int) -> str:
    """The method ``solver`` stands for at this point (see the module docstring)."""
    if solver == "auto":
        if at_identity:
            return "identity"
        return "direct" if size <= DIRECT_MAX else "gmres"
    return solver


def second_directional(
    fn: FlatMap, z: Tensor, g: Tensor, u: tuple[Tensor, Tensor], w: tuple[Tensor, Tensor]
) -> Tensor:
    """``∂²fn(z, g)[u, w]``: the second derivative along (dz, dg) = u and then w (nested JVPs)."""

    def first(zz: Tensor, gg: Tensor) -> Tensor:
        return func_jvp(fn, zz, gg, u[0], u[1])

    return func_jvp(first, z, g, w[0], w[1])


def second_derivatives(fn: FlatMap, z: Tensor, g: Tensor, directions: Tensor, kind: str) -> Tensor:
    """The second derivatives item 2b needs, shape ``(n, k, k)``, entry ``[:, i, j]``:

    * ``"zz"``: ∂²_zz fn[V_i, V_j] (V = ``directions``, J or K);
    * ``"gg"``: ∂²_gg fn[e_i, e_j];
    * ``"zg"``: ∂²_zg fn[V_i, e_j].

    Computed as the Hessian blocks of ``(s, h) ↦ fn(z + Σ s_i V_i, g + h)`` at 0 with vmapped
    forward mode (``jacfwd`` of ``jacfwd``), so k² derivatives cost two batched passes; looped
    over pairs with nested JVPs if an operation has no batching rule.
    """
    k = g.numel()

    def restricted(s: Tensor, h: Tensor) -> Tensor:
        return fn(z + s @ directions, g + h)

    zero = torch.zeros(k, dtype=g.dtype, device=g.device)
    first, second = {"zz": (0, 0), "gg": (1, 1), "zg": (0, 1)}[kind]
    try:
        return torch.func.jacfwd(torch.func.jacfwd(restricted, argnums=first), argnums=second)(
            zero, zero
        )
    except RuntimeError:  # an operation without a batching rule: nested JVPs pair by pair
        eye = torch.eye(k, dtype=g.dtype, device=g.device)
        zero_z = torch.zeros_like(z)

        def direction(which: int, i: int) -> tuple[Tensor, Tensor]:
            return (directions[i], zero) if which == 0 else (zero_z, eye[i])

        out = torch.stack(
            [
                torch.stack(
                    [
                        second_directional(fn, z, g, direction(first, i), direction(second, j))
                        for j in range(k)
                    ],
                    dim=-1,
                )
                for i in range(k)
            ],
            dim=-2,
        )
        return out


def covector_gradient(
    fn: FlatMap, z: Tensor, g: Tensor, covector: Tensor, direction: tuple[Tensor, Tensor]
) -> Tensor:
    """``∇_z ⟨covector, ∂fn(z, g)[direction]⟩`` with the covector and direction frozen
    (reverse-over-forward: a dual-tensor JVP whose tangent is differentiated by autograd).

    With fn = T, covector a and direction (J_j, −e_j) this is the parameter-side term of item
    2a, ``Σ_p a_p (Σ_s T_{p,qs} J_{sj} − T_{p,qj})`` = −(∂_θJ)ᵀ∇L column j; with fn = S,
    covector c and direction (−K_j, e_j) it is the output-side term whose VJP through the model
    gives (∂_θK)ᵀ∇ℓ (notes 003 §5b: both enter with +).
    """
    dz, dg = direction
    leaf = z.detach().requires_grad_(True)
    with torch.enable_grad():
        tangent = jvp(fn, leaf, g, dz, dg)
        if not tangent.requires_grad:  # ∂fn[direction] does not depend on z
            return torch.zeros_like(z)
        (gradient,) = torch.autograd.grad(
            tangent, leaf, grad_outputs=covector, allow_unused=True, materialize_grads=True
        )
    return gradient
