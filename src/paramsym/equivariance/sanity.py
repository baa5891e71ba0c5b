"""The sanity check run before any identity: is the transformation an equivariance at all?

For a continuous (T, S) it measures ``‖f(T(θ, g)) − S(f(θ), g)‖ / max(‖f(T(θ, g))‖,
‖S(f(θ), g)‖)`` at g₀, at a random g (a seeded draw g₀ + scale·N(0, I)) and at the g asked for
(notes 003 §5 item 1). At g₀ the check is vacuous when T(θ, g₀) = θ (rescaling on a tanh net
passes it there and fails at a random g, notes 003 §5b), hence the random g. It also checks that
g₀ is an identity: T(θ', g₀) = θ' and S(y', g₀) = y' at a perturbed θ' and y', which the fast
path (A = I, C = I at g₀) relies on.

For a discrete symmetry it measures ``‖f(T(θ')) − f(θ')‖`` at a random perturbation θ' of θ (at
a fixed point θ itself the check is vacuous).

A failure raises :class:`~paramsym.errors.EquivarianceError` with the measured residuals; for a
transformation labelled approximate (``exact=False``) it warns
(:class:`~paramsym.errors.ApproximateEquivarianceWarning`) and the check goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import forward_ad

from paramsym.core.params import Params, flatten
from paramsym.equivariance.forward import model_output
from paramsym.equivariance.transformations import Equivariance
from paramsym.errors import ApproximateEquivarianceWarning, EquivarianceError
from paramsym.tangent_kernel.outputs import OutputSelector


def relative_difference(a: Tensor, b: Tensor) -> float:
    """‖a − b‖ / max(‖a‖, ‖b‖), with 0/0 := 0."""
    num = float(torch.linalg.vector_norm((a - b).reshape(-1)))
    den = max(float(torch.linalg.vector_norm(a.reshape(-1))), float(torch.linalg.vector_norm(b)))
    if num == 0.0:
        return 0.0
    return num / den if den > 0 else float("inf")


def default_tolerance(dtype: torch.dtype) -> float:
    """√eps of ``dtype``: 1.5e-8 in float64, 3.5e-4 in float32 (as ``ps.symmetries(verify=)``)."""
    return float(torch.finfo(dtype).eps) ** 0.5


def perturbed(t: Tensor, generator: torch.Generator, scale: float = 0.1) -> Tensor:
    """``t`` plus Gaussian noise of size ``scale`` times its RMS entry (or ``scale`` if t = 0),
    drawn in ``t``'s dtype on the CPU."""
    dtype = t.dtype if t.is_floating_point() else torch.float64
    noise = torch.randn(t.shape, generator=generator, dtype=dtype).to(t)
    rms = float(torch.linalg.vector_norm(t)) / max(t.numel(), 1) ** 0.5
    return t + scale * (rms if rms > 0 else 1.0) * noise


def _fail(exact: bool, name: str, message: str) -> None:
    if exact:
        raise EquivarianceError(message)
    warnings.warn(
        message + f"; {name} is labelled approximate, so the identities are reported anyway "
        "and hold only approximately",
        ApproximateEquivarianceWarning,
        stacklevel=4,
    )


def continuous_sanity(
    model: nn.Module,
    x: Any,
    eq: Equivariance,
    params: Params,
    y0: Tensor,
    g: Tensor,
    *,
    scale: float,
    generator: torch.Generator,
    tol: float,
    output: OutputSelector = None,
) -> tuple[dict[str, float], bool]:
    """Residuals of eq. (1) at g₀, a random g and ``g``; and whether S(·, g₀) = id near y0
    (f is the tensor ``output`` selects, :func:`~paramsym.tangent_kernel.outputs.select_output`).

    Raises :class:`EquivarianceError` if g₀ is not an identity of T, or (for an exact
    transformation) if eq. (1) fails at any of the points by more than ``tol``.
    """
    dtype, device = g.dtype, g.device
    g0 = eq.identity_element(dtype, device)
    theta = flatten(params)
    moved = flatten(eq.apply(params, g0))
    shifted = {k: perturbed(t, generator) for k, t in params.items()}
    identity_residual = max(
        relative_difference(moved, theta),
        relative_difference(flatten(eq.apply(shifted, g0)), flatten(shifted)),
    )
    if identity_residual > tol:
        raise EquivarianceError(
            f"{eq.name}: g₀ = {g0.tolist()} is not an identity of T: T(θ, g₀) differs from θ by "
            f"{identity_residual:.2e} (relative); pass identity= the element with T(θ, g₀) = θ"
        )
    if eq.tangent is not None:
        xi = torch.randn(eq.dim, generator=generator, dtype=torch.float64).to(g)
        closed = flatten(eq.apply_tangent(params, xi))
        with forward_ad.dual_level():
            moved_dual = eq.apply(params, forward_ad.make_dual(g0, xi))
            rates = [forward_ad.unpack_dual(t).tangent for t in moved_dual.values()]
        by_jvp = flatten(
            {
                k: torch.zeros_like(params[k]) if r is None else r
                for k, r in zip(moved_dual, rates, strict=True)
            }
        )
        tangent_residual = relative_difference(closed, by_jvp)
        if tangent_residual > tol:
            raise EquivarianceError(
                f"{eq.name}: the closed-form tangent disagrees with ∂_gT(θ, g₀) by "
                f"{tangent_residual:.2e} (relative); fix tangent= or leave it out"
            )
    residuals: dict[str, float] = {}
    points = [("g0", g0), ("random g", eq.sample(scale, generator, dtype, device))]
    if not torch.equal(g, g0):
        points.append(("g", g))
    with torch.no_grad():
        for label, point in points:
            target = eq.apply_output(y0, point)
            if label == "g0" and torch.equal(moved, theta):
                image = y0
            else:
                image = model_output(model, eq.apply(params, point), x, "check_identities", output)
            residuals[label] = relative_difference(image, target)
        y_shift = perturbed(y0, generator)
        output_identity = relative_difference(eq.apply_output(y_shift, g0), y_shift) <= tol
    failing = {k: v for k, v in residuals.items() if not v <= tol}
    if failing:
        listing = ", ".join(f"{v:.2e} at {k}" for k, v in failing.items())
        _fail(
            eq.exact,
            eq.name,
            f"{eq.name} is not an equivariance of this model: f(T(θ, g)) − S(f(θ), g) has "
            f"relative size {listing} (tolerance {tol:.1e}; seed 003 eq. (1)); check T and S "
            "(for a symmetry S = id) and that the model has the structure T assumes",
        )
    return residuals, output_identity


def discrete_sanity(
    model: nn.Module,
    x: Any,
    apply: Callable[[Mapping[str, Tensor]], Params],
    params: Params,
    name: str,
    *,
    scale: float,
    generator: torch.Generator,
    tol: float,
    output: OutputSelector = None,
) -> dict[str, float]:
    """Residual of f(T(θ')) = f(θ') at a random perturbation θ' of θ (noise of ``scale`` times
    each tensor's RMS entry; f is the tensor ``output`` selects); raises if above ``tol``."""
    shifted = {k: perturbed(t, generator, scale) for k, t in params.items()}
    with torch.no_grad():
        before = model_output(model, shifted, x, "check_identities", output)
        after = model_output(model, apply(shifted), x, "check_identities", output)
    residual = relative_difference(after, before)
    if not residual <= tol:
        raise EquivarianceError(
            f"{name} is not a symmetry of this model: at a random point θ' near θ, f(T(θ')) "
            f"differs from f(θ') by {residual:.2e} (relative, tolerance {tol:.1e}; seed 003 "
            "Thm. 2 needs f∘T = f)"
        )
    return {"random point": residual}
