"""An embedding's LayerNorm whose output only mean-subtracting norms read (BLOOM).

BLOOM looks tokens up in a table E (V × d) and normalises each row, ``y_r = γ ⊙ x̂(E_r) + β``
with ``x̂(x) = (x − μ)/sqrt(var(x) + eps)``, before the residual stream, which only LayerNorms
read (notes 005 §4): adding any multiple of 1 to a token's vector, ``y_r + c_r·1``, changes
nothing. With eps > 0 the normalisation maps the row's centred part onto the open ball
``{u : 1ᵀu = 0, |u|² < d}`` one to one (``x − μ = s·u`` with ``s² = eps/(1 − |u|²/d)``), so γ
and β can take any values near theirs while the table follows: for an affine map
``g = (a, b)`` of each feature, ``y ↦ a ⊙ y + b``,

    γ' = a ⊙ γ,   β' = a ⊙ β + b,
    E'_r = μ_r + s'_r u'_r,   u'_r = (y_r + c_r 1 − β')/γ',   s'_r = sqrt(eps/(1 − |u'_r|²/d)),

with c_r the one number that makes ``1ᵀu'_r = 0``. Every token's normalised output becomes
``y_r + c_r 1``: the same function, exactly (found by the completeness audit on BLOOM: its
16 − 1 flat directions, one being the stream's translation of β along 1). Left action of the
group of diagonal affine maps (``(a₁, b₁)(a₂, b₂) = (a₁a₂, a₁b₂ + b₁)``): E' depends only on
γ', β' and the classes ``y_r mod 1``, which no element changes.

The action is **local**: it is defined while every row's target stays inside the ball,
``|u'_r|² < d``, and a row's normalised vector sits close to its edge (``1 − |x̂|²/d =
eps/(var + eps)``, about 1e-3 at initialisation and smaller in trained models), so only small
elements keep it: shrinking γ by more than about half of that moves a row out. :meth:`act`
raises :class:`~paramsym.errors.InvalidGroupElementError` naming the row there, and
:meth:`sample` draws at ``scale·``:data:`LOCAL_REACH` (the Lie-algebra coordinates keep their
meaning: ``exp(ξ)`` is the affine map with ``a = e^α``). Not affine in θ: gradients transport
through the action's Jacobian (the generic covector transport).

Elements are tensors of shape ``(2, d)``: row 0 the scales a (positive), row 1 the shifts b.
Lie-algebra coordinates ξ = (α, ν) ∈ ℝ^{2d}: ``exp(ξ) = (e^α, ν (e^α − 1)/α)``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import (
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    ShapeError,
)
from paramsym.symmetry.base import GroupElement, Region, Symmetry

LOCAL_REACH = 1e-6
""":meth:`EmbeddingNormAffine.sample` draws its Lie-algebra element at ``scale`` times this:
small enough that every row stays inside the norm's range at any reasonable point (module
docstring)."""


class EmbeddingNormAffine(Symmetry):
    """The affine maps of an embedding's LayerNorm output, the table following (module
    docstring).

    Args:
        table: the embedding table E, shape ``(V, d)``.
        weight: the norm's γ, shape ``(d,)``.
        bias: the norm's β, shape ``(d,)``.
        eps: the norm's eps (> 0).
        width: d.
        site: label used in the name.
    """

    default_teleport = False
    """Left out of the default teleport: a local action (small elements only), neither affine
    nor a shift by what it reads, so it would send the whole teleport to the Hessian path;
    pass it in ``symmetries=`` to move along it."""

    def __init__(
        self, table: str, weight: str, bias: str, *, eps: float, width: int, site: str
    ) -> None:
        if not eps > 0:
            raise InvalidArgumentError(
                f"embedding_norm[{site}]: needs eps > 0 (with eps = 0 the rows' scales are "
                "free instead, and γ, β are not)"
            )
        super().__init__(
            name=f"embedding_norm[{site}]",
            group=f"Aff(1)^{width}",
            dim=2 * width,
            linear=False,
            affine=False,
            notes=("a local action: defined for elements that keep every row inside the "
                   "norm's range (module docstring of paramsym.symmetry.embedding_norm)",),
        )  # fmt: skip
        self.table, self.weight, self.bias = table, weight, bias
        self.eps, self.width = float(eps), int(width)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return (self.table, self.weight, self.bias)

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset(
            {(self.table, 0, 0, None), (self.table, 1, 0, None), (self.weight, 0, 0, None),
             (self.bias, 0, 0, None)}
        )  # fmt: skip

    # -- the group -------------------------------------------------------------------------
    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.stack(
            [torch.ones(self.width, dtype=dtype), torch.zeros(self.width, dtype=dtype)]
        )

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        xi = torch.randn(self.dim, generator=generator, dtype=dtype)
        return self.exp(scale * LOCAL_REACH * xi)

    def exp(self, xi: Tensor) -> Tensor:
        xi = self.check_xi(xi)
        alpha, nu = xi[: self.width], xi[self.width :]
        small = alpha.abs() < 1e-8
        safe = torch.where(small, torch.ones_like(alpha), alpha)
        ratio = torch.where(small, 1.0 + alpha / 2, torch.expm1(alpha) / safe)
        return torch.stack([torch.exp(alpha), nu * ratio])

    def linear_element(self, xi: Tensor) -> Tensor:
        xi = self.check_xi(xi)
        return torch.stack([1.0 + xi[: self.width], xi[self.width :]])

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        a1, b1 = self.check_element(g1)
        a2, b2 = self.check_element(g2)
        return torch.stack([a1 * a2, a1 * b2 + b1])

    def inverse(self, g: GroupElement) -> Tensor:
        a, b = self.check_element(g)
        return torch.stack([1.0 / a, -b / a])

    def check_element(self, g: GroupElement) -> Tensor:
        g = self._element_tensor(g, (2, self.width), "an affine map (scales; shifts)")
        if not bool(torch.isfinite(g).all()) or not bool((g[0] > 0).all()):
            raise InvalidGroupElementError(
                f"{self.name}: scales must be positive and every entry finite"
            )
        return g

    # -- the action ------------------------------------------------------------------------
    def _parts(self, params: Mapping[str, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        for name in self.parameter_names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
        table, gamma, beta = (params[n] for n in self.parameter_names)
        if (
            table.ndim != 2
            or table.shape[1] != self.width
            or (tuple(gamma.shape) != (self.width,) or tuple(beta.shape) != (self.width,))
        ):
            raise ShapeError(
                f"{self.name}: expected a table (V, {self.width}) and γ, β of shape "
                f"({self.width},), got {tuple(table.shape)}, {tuple(gamma.shape)}, "
                f"{tuple(beta.shape)}"
            )
        return table, gamma, beta

    def _normalised(self, table: Tensor) -> tuple[Tensor, Tensor]:
        """(row means, x̂ of every row)."""
        mean = table.mean(dim=1, keepdim=True)
        centred = table - mean
        variance = centred.square().mean(dim=1, keepdim=True)
        return mean, centred / torch.sqrt(variance + self.eps)

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        table, gamma, beta = self._parts(params)
        check_finite(((n, params[n]) for n in self.parameter_names), self.name)
        a, b = self.check_element(g).to(dtype=table.dtype, device=table.device)
        mean, normalised = self._normalised(table)
        y = gamma * normalised + beta
        new_gamma, new_beta = a * gamma, a * beta + b
        inverse = 1.0 / new_gamma
        z = (y - new_beta) * inverse
        u = z - (z.sum(dim=1, keepdim=True) / inverse.sum()) * inverse
        room = 1.0 - u.square().mean(dim=1, keepdim=True)
        if not bool((room > 0).all()):
            row = int(torch.argmin(room))
            raise InvalidGroupElementError(
                f"{self.name}: the element moves row {row} of '{self.table}' out of the "
                "norm's range (its normalised vector would need |u|² ≥ d); the action is "
                "local: use a smaller element"
            )
        out = dict(params)
        out[self.table] = mean + torch.sqrt(self.eps / room) * u
        out[self.weight], out[self.bias] = new_gamma, new_beta
        return out

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """d/dt act(θ, exp(tξ)) at 0 in closed form: γ̇ = αγ, β̇ = αβ + ν, and each row moves
        along ``ṡ x̂ + s u̇`` with ``u̇ = −β̇/γ − α x̂ + ċ/γ`` (ċ keeping 1ᵀu̇ = 0),
        ``s = sqrt(var + eps)``, ``ṡ = s · mean(x̂ u̇)/(1 − mean(x̂²))``."""
        xi = self.check_xi(xi)
        table, gamma, beta = self._parts(params)
        xi = xi.to(dtype=table.dtype, device=table.device)
        alpha, nu = xi[: self.width], xi[self.width :]
        mean, normalised = self._normalised(table)
        beta_rate = alpha * beta + nu
        inverse = 1.0 / gamma
        rate = -beta_rate * inverse - alpha * normalised
        rate = rate - (rate.sum(dim=1, keepdim=True) / inverse.sum()) * inverse
        centred = table - mean
        size = torch.sqrt(centred.square().mean(dim=1, keepdim=True) + self.eps)
        room = self.eps / size.square()  # 1 − mean(x̂²), without the cancellation
        size_rate = size * (normalised * rate).mean(dim=1, keepdim=True) / room
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        out[self.table] = size_rate * normalised + size * rate
        out[self.weight] = alpha * gamma
        out[self.bias] = beta_rate
        return out
