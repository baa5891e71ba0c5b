"""Orbit curvature κ and ψ of a minimum (dissertation §5.2, Eq. 5.2) and the curvature teleport
objective (Algorithm 2).

**Orbit curvature**: for ξ in the Lie algebra, the curve γ(t) = exp(tξ)·θ (several
symmetries: their actions composed in order, each with its own ξ_s) has curvature

    κ = ‖γ″⊥‖ / ‖γ′‖²  at t = 0,   γ″⊥ = γ″ − (⟨γ″, γ′⟩/‖γ′‖²) γ′,

equal to the text's √(‖γ′‖²‖γ″‖² − ⟨γ′, γ″⟩²)/‖γ′‖³ but without its cancellation and with a
finite gradient at κ = 0 (a straight orbit). γ′ and γ″ are nested forward-mode derivatives
(``torch.func.jvp`` of ``jvp``) through the whole composed action, never finite differences:
the closed forms of the authors' code are wrong for tanh (σ⁻¹″ ≠ 0) and for pairs that share
a weight (notes 001b §3). ψ(θ, k) averages κ over k random algebra elements, each symmetry's
ξ_s with U[0, 1) entries normalised to ‖ξ_s‖ = 1 as in the authors' code (``"orthant"``), or
Gaussian ones (``"sphere"``).

Where γ′ = 0 (ξ in the stabiliser of θ, e.g. a dead unit) a group orbit is a single point
(γ ≡ θ), and κ is defined as 0 with a zero gradient. "γ′ = 0" means
‖γ′‖ ≤ 64 ε ‖ξ‖ max(‖θ_s‖, 1) with ε the dtype's machine epsilon and θ_s the moved tensors.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import require_module
from paramsym.core.params import resolve_params
from paramsym.errors import ApproximateActionWarning, InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.teleportation.flatness import (
    Distribution,
    _check_count,
    _check_distribution,
    _seed_from,
    _unit,
)
from paramsym.teleportation.objectives import Batch, Objective, TeleportContext

# -- orbit curvature (Eq. 5.2) -----------------------------------------------------------------


def _as_lists(
    symmetry: Symmetry | Sequence[Symmetry], xi: Tensor | Sequence[Tensor], where: str
) -> tuple[list[Symmetry], list[Tensor]]:
    symmetries = [symmetry] if isinstance(symmetry, Symmetry) else list(symmetry)
    xis = [xi] if isinstance(xi, Tensor) else list(xi)
    if not symmetries:
        raise InvalidArgumentError(f"{where}: no symmetry given")
    if len(xis) != len(symmetries):
        raise InvalidArgumentError(
            f"{where}: give one algebra element per symmetry ({len(symmetries)} symmetries, "
            f"{len(xis)} elements)"
        )
    for s, v in zip(symmetries, xis, strict=True):
        if not isinstance(s, Symmetry):
            raise InvalidArgumentError(
                f"{where}: symmetries must be Symmetry objects, got {type(s).__name__}"
            )
        if s.dim == 0:
            raise InvalidArgumentError(
                f"{where}: {s.name} is discrete (dim 0): it has no Lie algebra and no orbit "
                "curve; orbit curvature needs continuous symmetries"
            )
        s.check_xi(v)
    return symmetries, xis


def _derivatives(
    symmetries: Sequence[Symmetry],
    xis: Sequence[Tensor],
    params: Mapping[str, Tensor],
    x: Tensor | None,
    names: Sequence[str],
) -> tuple[list[Tensor], list[Tensor]]:
    """γ′(0), γ″(0) on ``names`` (flattened), by jvp of jvp through the composed action."""
    ref = params[names[0]]

    def curve(t: Tensor) -> tuple[Tensor, ...]:
        current = dict(params)
        for s, xi in zip(symmetries, xis, strict=True):
            g = s.exp(t * xi.to(dtype=ref.dtype, device=ref.device))
            current = s.act(current, g, x if s.data_dependent else None)
        return tuple(current[k].reshape(-1) for k in names)

    def velocity(t: Tensor) -> tuple[Tensor, ...]:
        return torch.func.jvp(curve, (t,), (torch.ones_like(t),))[1]

    zero = torch.zeros((), dtype=ref.dtype, device=ref.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ApproximateActionWarning)
        first, second = torch.func.jvp(velocity, (zero,), (torch.ones_like(zero),))[:2]
    return list(first), list(second)


def _curvature(
    symmetries: Sequence[Symmetry],
    xis: Sequence[Tensor],
    params: Mapping[str, Tensor],
    x: Tensor | None,
) -> Tensor:
    """κ = ‖γ″⊥‖/‖γ′‖² (0 where γ′ = 0); differentiable in ``params``."""
    moved = {k for s in symmetries for k in s.parameter_names}
    names = [k for k in params if k in moved]
    for s in symmetries:
        if s.data_dependent and x is None:
            raise InvalidArgumentError(
                f"orbit_curvature: {s.name} is data-dependent; pass the batch's inputs as x"
            )
    first, second = _derivatives(symmetries, xis, params, x, names)
    a, b = torch.cat(first), torch.cat(second)
    speed2 = (a * a).sum()
    size = math.sqrt(sum(float((params[k].detach() ** 2).sum()) for k in names))
    xi_norm = math.sqrt(sum(float((v.detach() ** 2).sum()) for v in xis))
    eps = torch.finfo(a.dtype).eps
    if math.sqrt(float(speed2.detach())) <= 64 * eps * xi_norm * max(size, 1.0):
        return speed2 * 0.0  # γ′ = 0: a point orbit, κ := 0 with a zero gradient
    perp = b - ((a * b).sum() / speed2) * a
    return torch.linalg.vector_norm(perp) / speed2


def orbit_curvature(
    model: nn.Module,
    symmetry: Symmetry | Sequence[Symmetry],
    xi: Tensor | Sequence[Tensor],
    params: Mapping[str, Tensor] | None = None,
    x: Tensor | None = None,
) -> Tensor:
    """Curvature κ at t = 0 of the orbit curve γ(t) = exp(tξ)·θ (dissertation Eq. 5.2).

    Args:
        model: the model whose parameters θ are (default for ``params``).
        symmetry: one continuous symmetry, or several whose actions are composed in order
            (γ(t) = exp(tξ_n)·…·exp(tξ_1)·θ), e.g. every layer pair of an MLP.
        xi: algebra coordinates, shape ``(s.dim,)``, one per symmetry. κ does not depend on
            their overall scale or sign.
        params: θ (default the model's parameters); tensors that require grad make κ
            differentiable in them (a third derivative of the action).
        x: the batch's inputs, for data-dependent actions.

    Returns:
        A scalar tensor κ = ‖γ″⊥‖/‖γ′‖² ≥ 0, γ′ and γ″ by nested forward-mode derivatives
        through the composed action; 0 where γ′ = 0 (see the module docstring).
    """
    require_module(model, "orbit_curvature")
    symmetries, xis = _as_lists(symmetry, xi, "orbit_curvature")
    return _curvature(symmetries, xis, resolve_params(model, params), x)


def random_algebra_elements(
    symmetries: Sequence[Symmetry],
    k: int = 1,
    generator: torch.Generator | None = None,
    *,
    distribution: Distribution = "orthant",
    dtype: torch.dtype = torch.float64,
) -> list[list[Tensor]]:
    """k random curves' algebra elements: for each, one ξ_s per symmetry of unit norm, with
    U[0, 1) entries (``"orthant"``, the authors' M normalised to ‖M‖_F = 1) or Gaussian ones
    (``"sphere"``). Returns k lists of tensors of shapes ``(s.dim,)``."""
    _check_count(k, "k", "random_algebra_elements")
    _check_distribution(distribution, "random_algebra_elements")
    symmetries, _ = _as_lists(
        list(symmetries), [torch.zeros(s.dim) for s in symmetries], "random_algebra_elements"
    )
    gen = torch.Generator().manual_seed(_seed_from(generator))
    return [
        [_unit([torch.Size([s.dim])], gen, distribution)[0].to(dtype) for s in symmetries]
        for _ in range(k)
    ]


def mean_orbit_curvature(
    model: nn.Module,
    symmetries: Symmetry | Sequence[Symmetry],
    k: int = 1,
    generator: torch.Generator | None = None,
    params: Mapping[str, Tensor] | None = None,
    x: Tensor | None = None,
    *,
    distribution: Distribution = "orthant",
) -> Tensor:
    """ψ(θ, k) of Eq. 5.2: the mean of :func:`orbit_curvature` over k random curves drawn by
    :func:`random_algebra_elements` (a scalar tensor)."""
    require_module(model, "mean_orbit_curvature")
    chosen = [symmetries] if isinstance(symmetries, Symmetry) else list(symmetries)
    theta = resolve_params(model, params)
    dtype = next(iter(theta.values())).dtype
    elements = random_algebra_elements(chosen, k, generator, distribution=distribution, dtype=dtype)
    return torch.stack([_curvature(chosen, xis, theta, x) for xis in elements]).mean()


class Curvature(Objective):
    """ψ(θ, k) of Eq. 5.2 as a teleport objective (Algorithm 2; maximised by default,
    ``ascend=False`` lowers it).

    Args:
        k: curves averaged (the text uses 1, the authors' code 200).
        symmetries: the orbits to measure; default the symmetries the teleport moves along.
        generator: where the algebra elements come from; drawn at the start of each teleport
            and held fixed through its steps.
        distribution: as in :func:`random_algebra_elements`.
    """

    name = "curvature"

    def __init__(
        self,
        k: int = 1,
        symmetries: Sequence[Symmetry] | None = None,
        generator: torch.Generator | None = None,
        *,
        distribution: Distribution = "orthant",
    ) -> None:
        self.k = _check_count(k, "k", "Curvature")
        _check_distribution(distribution, "Curvature")
        self.symmetries = None if symmetries is None else self._continuous(symmetries)
        self.generator, self.distribution = generator, distribution
        self._chosen: list[Symmetry] | None = None
        self._elements: list[list[Tensor]] | None = None

    @staticmethod
    def _continuous(symmetries: Sequence[Symmetry]) -> list[Symmetry]:
        chosen = list(symmetries)
        continuous = [s for s in chosen if isinstance(s, Symmetry) and s.dim > 0]
        if not continuous:
            names = ", ".join(getattr(s, "name", type(s).__name__) for s in chosen) or "none"
            raise InvalidArgumentError(
                f"Curvature: no continuous symmetry among {names}; the orbit curvature needs a "
                "Lie algebra (discrete symmetries have none)"
            )
        return continuous

    def start(
        self, symmetries: Sequence[Symmetry], params: Mapping[str, Tensor], batch: Batch
    ) -> None:
        chosen = self.symmetries or self._continuous(symmetries)
        dtype = next(iter(params.values())).dtype
        self._chosen = chosen
        self._elements = random_algebra_elements(
            chosen, self.k, self.generator, distribution=self.distribution, dtype=dtype
        )

    def __call__(self, context: TeleportContext) -> Tensor:
        if self._elements is None or self._chosen is None:
            if self.symmetries is None:
                raise InvalidArgumentError(
                    "Curvature: no symmetries to measure; use it through ps.teleport, or pass "
                    "Curvature(symmetries=...)"
                )
            self.start(self.symmetries, context.params, context.batch)
        assert self._elements is not None
        assert self._chosen is not None
        x = context.batch[0]
        values = [_curvature(self._chosen, xis, context.params, x) for xis in self._elements]
        return torch.stack(values).mean()
