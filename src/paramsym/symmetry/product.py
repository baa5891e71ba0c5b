"""A product of commuting symmetries acting together (a direct product of groups).

For the hidden GL groups of a deep linear network, the product of the per-layer symmetries is
the multi-layer action ``W_i ↦ g_i W_i g_{i−1}⁻¹, b_i ↦ g_i b_i`` of Table 1.1 row 17
(dissertation A.2.4): layer i's GL acts on the rows of W_i and the columns of W_{i+1}, layer
i−1's on the columns of W_i, and left and right multiplications commute.

Elements are tuples (one element per factor); algebra coordinates are the concatenation of
the factors' coordinates. Factors must act on disjoint (parameter, axis) pairs, which makes
their actions commute; otherwise (e.g. a rescaling and a permutation of the same layer, which
form a semidirect product) the componentwise group law would be wrong and construction fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symmetry.base import GroupElement, Region, Symmetry, regions_overlap


class ProductSymmetry(Symmetry):
    """The direct product of commuting symmetries, acting together.

    >>> import paramsym as ps
    >>> model = ps.mlp([3, 4, 4, 2], activation="identity", seed=0)
    >>> hidden_gl = ProductSymmetry([s for s in ps.symmetries(model) if s.dim > 0])
    >>> hidden_gl.group, hidden_gl.dim
    ('GL(4) × GL(4)', 32)
    """

    def __init__(self, factors: Sequence[Symmetry], *, name: str | None = None) -> None:
        factors = tuple(factors)
        if not factors:
            raise InvalidArgumentError("ProductSymmetry: needs at least one factor")
        for i, a in enumerate(factors):
            for b in factors[i + 1 :]:
                shared = [
                    r
                    for r in a.touched_regions
                    if any(regions_overlap(r, q) for q in b.touched_regions)
                ]
                if shared:
                    raise InvalidArgumentError(
                        f"ProductSymmetry: {a.name} and {b.name} both act on parameter "
                        f"'{shared[0][0]}' along axis {shared[0][1]}, so they need not commute "
                        "and their product is not a direct product; combine symmetries of "
                        "different layers, or act with them one after the other"
                    )
        super().__init__(
            name=name or " × ".join(f.name for f in factors),
            group=" × ".join(f.group for f in factors),
            dim=sum(f.dim for f in factors),
            exact=all(f.exact for f in factors),
            data_dependent=any(f.data_dependent for f in factors),
            preserves="loss" if any(f.preserves == "loss" for f in factors) else "function",
            linear=all(f.linear for f in factors),
            notes=tuple(n for f in factors for n in f.notes),
        )
        self.factors = factors
        self.buffer_names = frozenset(n for f in factors for n in f.buffer_names)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for f in self.factors for n in f.parameter_names))

    @property
    def touched_regions(self) -> frozenset[Region]:
        return frozenset().union(*(f.touched_regions for f in self.factors))

    @property
    def order(self) -> int | None:
        """The product of the factors' orders (``None`` if one is continuous or unknown)."""
        orders = [f.order for f in self.factors]
        return None if None in orders else math.prod(o for o in orders if o is not None)

    def _elements(self, g: GroupElement) -> tuple[GroupElement, ...]:
        if not isinstance(g, tuple) or len(g) != len(self.factors):
            raise ShapeError(
                f"{self.name}: an element of a product of {len(self.factors)} symmetries is a "
                f"tuple of {len(self.factors)} elements, got {type(g).__name__}"
            )
        return g

    def _split(self, xi: Tensor) -> list[Tensor]:
        return list(torch.split(self.check_xi(xi), [f.dim for f in self.factors]))

    def _identity(self, dtype: torch.dtype) -> tuple[GroupElement, ...]:
        return tuple(f.identity(dtype) for f in self.factors)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> tuple[GroupElement, ...]:
        return tuple(f.sample(scale, generator, dtype) for f in self.factors)

    def exp(self, xi: Tensor) -> tuple[GroupElement, ...]:
        return tuple(f.exp(part) for f, part in zip(self.factors, self._split(xi), strict=True))

    def linear_element(self, xi: Tensor) -> tuple[GroupElement, ...]:
        return tuple(
            f.linear_element(part) for f, part in zip(self.factors, self._split(xi), strict=True)
        )

    def compose(self, g1: GroupElement, g2: GroupElement) -> tuple[GroupElement, ...]:
        return tuple(
            f.compose(a, b)
            for f, a, b in zip(self.factors, self._elements(g1), self._elements(g2), strict=True)
        )

    def inverse(self, g: GroupElement) -> tuple[GroupElement, ...]:
        return tuple(f.inverse(a) for f, a in zip(self.factors, self._elements(g), strict=True))

    def check_element(self, g: GroupElement) -> tuple[GroupElement, ...]:
        return tuple(
            f.check_element(a) for f, a in zip(self.factors, self._elements(g), strict=True)
        )

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        out = dict(params)
        for f, a in zip(self.factors, self._elements(g), strict=True):
            out = f.act(out, a, x)
        return out

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        out = {k: torch.zeros_like(t) for k, t in params.items()}
        for f, part in zip(self.factors, self._split(xi), strict=True):
            if f.dim:
                for k, t in f.tangent(params, part, x).items():
                    out[k] = out[k] + t
        return out
