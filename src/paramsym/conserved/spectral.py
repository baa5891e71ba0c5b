"""Radial reparameterisation with spectral initialisation: λ_i sets the rate (§2.7.2, Fig 2.5).

The objective of Props 2.7.1-2.7.3 is L = ½‖Y − U g(Vᵀ)‖²_F with U ∈ R^{m×h}, V ∈ R^{n×h} and
g(W)_ij = h(|W_i|) W_ij rescaling each row of Vᵀ (each column v_i of V); with h(r) = r⁻²,
g(v) = v/|v|². Since g(c v) = g(v)/c for c > 0, the rescaling (U_{:,i}, v_i) ↦ (c U_{:,i}, c v_i)
leaves X = U g(Vᵀ) unchanged: a positive scaling of a degree −1 "activation", whose moment map
(:class:`~paramsym.conserved.MomentMap`) is

    λ_i = ‖U_{:,i}‖² + ‖v_i‖²,

conserved along gradient flow from *any* initialisation [derived]; the dissertation's
λ_i = ū_i² + v̄_i² (Eq. 2.41) is its value at a spectral initialisation.

**Spectral initialisation.** With Y = Φ Σ_Y Ψᵀ, U₀ = Φ Ū₀ and V₀ = Ψ V̄₀ for diagonal Ū₀, V̄₀, the
flow stays in this form and decouples into scalar problems with σ_i^X = ū_i/v̄_i and
(Prop 2.7.2) σ̇_i^X = (1/λ_i)(σ_i^Y − σ_i^X)((σ_i^X)² + 1)², hence (Prop 2.7.3)

    |σ_i^X(t) − σ_i^Y| ≤ |σ_i^X(0) − σ_i^Y| e^{−t/λ_i}:

the smaller λ_i, the faster the convergence. :func:`spectral_init` sets λ_i and σ_i^X(0)
through ū² = λσ²/(σ² + 1), v̄² = λ/(σ² + 1) (Eq. 2.43).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from paramsym.core.params import resolve_params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.scaling import PositiveScaling


class RadialReparameterization(nn.Module):
    """X = U g(Vᵀ) with g(v) = v/|v|² on each column of V (Prop 2.7.2's objective).

    Args:
        outputs, hidden, inputs: m, h, n (Fig 2.5: U ∈ R^{5×5}, V ∈ R^{10×5}).

    ``forward(x)`` returns ``x Xᵀ`` (rows of x are samples), so on the whitened batch x = I_n
    it returns Xᵀ and ``0.5 * ((model(I) - Y.T) ** 2).sum()`` is L. ``ps.symmetries`` finds its
    per-column rescaling (the ``paramsym_symmetries`` hook), whose conserved quantities are the
    λ_i.
    """

    def __init__(
        self,
        outputs: int,
        hidden: int,
        inputs: int,
        *,
        dtype: torch.dtype | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if min(outputs, hidden, inputs) < 1:
            raise InvalidArgumentError(
                f"RadialReparameterization: sizes must be positive, got ({outputs}, {hidden}, "
                f"{inputs})"
            )
        kind = torch.get_default_dtype() if dtype is None else dtype
        self.U = nn.Parameter(torch.randn(outputs, hidden, generator=generator, dtype=kind))
        self.V = nn.Parameter(torch.randn(inputs, hidden, generator=generator, dtype=kind))

    def matrix(self, params: Mapping[str, Tensor] | None = None) -> Tensor:
        """X = U g(Vᵀ), shape (m, n)."""
        point = resolve_params(self, params)
        u, v = point["U"], point["V"]
        return u @ (v / (v * v).sum(dim=0, keepdim=True)).T

    def forward(self, x: Tensor) -> Tensor:
        u, v = self.U, self.V
        return x @ (u @ (v / (v * v).sum(dim=0, keepdim=True)).T).T

    def paramsym_symmetries(self, prefix: str) -> list[Symmetry]:
        """The per-column rescaling (c U_{:,i}, c v_i), c > 0 (degree −1: both slots power +1)."""
        return [
            PositiveScaling(
                self.U.shape[1],
                [Slot(f"{prefix}V", 1, 1.0)],
                [Slot(f"{prefix}U", 1, 1.0)],
                degree=-1.0,
                family="radial_rescaling",
                site=prefix[:-1] if prefix else "radial",
            )
        ]


def _svd(y: Tensor, hidden: int) -> tuple[Tensor, Tensor, Tensor]:
    phi, sigma, psi_t = torch.linalg.svd(y, full_matrices=False)
    if hidden > sigma.numel():
        raise ShapeError(
            f"spectral initialisation needs hidden ≤ rank of Y's SVD ({sigma.numel()}), "
            f"got hidden={hidden}"
        )
    return phi[:, :hidden], sigma[:hidden], psi_t[:hidden].T


def spectral_init(
    model: RadialReparameterization,
    y: Tensor,
    lambdas: float | Sequence[float] | Tensor,
    sigma0: float | Sequence[float] | Tensor = 0.0,
) -> None:
    """Set U = Φ Ū, V = Ψ V̄ (in place) with λ_i = ū_i² + v̄_i² and σ_i^X(0) = ū_i/v̄_i (Eq. 2.43).

    Args:
        model: the reparameterisation, with U of shape (m, h) and V of shape (n, h).
        y: the target Y, shape (m, n), with Φ, Ψ its leading h singular vectors.
        lambdas: λ_i > 0 (one value, or h values).
        sigma0: σ_i^X(0) (one value, or h values).
    """
    m, h = model.U.shape
    n = model.V.shape[0]
    if y.shape != (m, n):
        raise ShapeError(f"spectral_init: Y must have shape ({m}, {n}), got {tuple(y.shape)}")
    phi, _, psi = _svd(y.to(model.U.dtype), h)
    lam = torch.as_tensor(lambdas, dtype=model.U.dtype).expand(h)
    sig = torch.as_tensor(sigma0, dtype=model.U.dtype).expand(h)
    if not bool((lam > 0).all()):
        raise InvalidArgumentError("spectral_init: every λ_i must be > 0")
    u_bar = torch.sign(sig) * torch.sqrt(lam * sig * sig / (sig * sig + 1))
    v_bar = torch.sqrt(lam / (sig * sig + 1))
    with torch.no_grad():
        model.U.copy_(phi * u_bar)
        model.V.copy_(psi * v_bar)


def spectral_sigma(
    model: RadialReparameterization, y: Tensor, params: Mapping[str, Tensor] | None = None
) -> Tensor:
    """σ_i^X = (Φᵀ X Ψ)_ii, the components of X along Y's singular pairs, shape (h,)."""
    phi, _, psi = _svd(y.to(model.U.dtype), model.U.shape[1])
    return torch.diagonal(phi.T @ model.matrix(params) @ psi)


def spectral_rate_bound(
    t: float | Tensor, lambdas: Tensor, sigma0: Tensor, sigma_y: Tensor
) -> Tensor:
    """Prop 2.7.3's bound |σ_i^X(0) − σ_i^Y| e^{−t/λ_i} on |σ_i^X(t) − σ_i^Y|."""
    return (sigma0 - sigma_y).abs() * torch.exp(-torch.as_tensor(t) / lambdas)
