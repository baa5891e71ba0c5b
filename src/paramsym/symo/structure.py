"""The space of matrices that commute with an MLP's symmetry group (seed 002, Lemma 2.4,
Theorems 3.1 and 3.2), in the form SymO computes with.

**Decomposition.** The group acts on the parameter vector θ = (W_1, b_1, …, W_L, b_L) by
``G = blockdiag(V_0⊗V_1, V_1, V_1⊗V_2, …)`` (Eq. 17, V_0 = V_L = I). Split each hidden index
space R^{d_ℓ} into irreducible pieces of its group:

* O(d) and B(d) (odd or linear activations): R^d is irreducible (piece ``"def"``, dimension d);
* S(d) (other activations): R^d = span(1) ⊕ 1^⊥ (pieces ``"one"``, dimension 1, and ``"std"``,
  dimension d − 1; ``"std"`` is absent when d = 1).

Every parameter tensor then splits into copies of irreducible representations of the product
group, one *type* per set of non-trivial pieces, e.g. ``"def1"`` (the columns of W_1, b_1 and the
rows of W_L when L = 2), ``"std1*std2"`` (the doubly centred part of W_2 in a ReLU net) and
``"trivial"`` (everything invariant, e.g. b_L). Input and output indices (d_0, d_L) are not acted
on, so they count copies. By Schur's lemma every matrix Σ with GΣGᵀ = Σ for all G is

    Σ = Σ_τ Q_τ (M_τ ⊗ I_{dim τ}) Q_τᵀ,

with one free ``n_τ × n_τ`` *factor matrix* M_τ per type (n_τ = number of copies, symmetric
for a symmetric Σ) and Q_τ the isometry that collects the copies (:meth:`coordinates` is Q_τᵀ,
:meth:`assemble` is Q_τ). So the commutant has dimension Σ_τ n_τ² (Σ_τ n_τ(n_τ+1)/2 symmetric),
the factors do not depend on the hidden widths, analytic functions act block by block
(f(Σ) ↔ f(M_τ)), and spec(Σ) is the union of spec(M_τ), each eigenvalue repeated dim τ times.

**Relation to the paper's factors.** For odd activations the blocks *are* Theorem 3.1's factors;
e.g. for L = 2 without bias there is one type, ``"def1"``, with copies (columns of W_1, rows of
W_2), and M = [[Φ_1, Ψ_1], [Ψ_1ᵀ, Φ_2]] is the surrogate Λ of Eq. 202. With biases the copies
of ``"def1"`` are (columns of W_1, b_1, rows of W_2) for L = 2. For L ≥ 3, ``"def1"`` holds
(Φ_1, φ̃_1 vector, φ̃_1 scalar) from (columns of W_1, b_1); ``"def{L−1}"`` holds (φ̃_{L−1}
scalar, φ̃_{L−1} vector, Φ_L) from (b_{L−1}, rows of W_L); ``"def{ℓ}"`` (2 ≤ ℓ ≤ L−2) is the
scalar φ̃_ℓ of b_ℓ (Eq. 33); ``"def{ℓ−1}*def{ℓ}"`` is φ_ℓ of an interior W_ℓ (Eq. 30); and
``"trivial"`` is Φ̃_L of b_L (Eq. 34). For permutations (Theorem 3.2) the paper's
all-ones terms become the ``"trivial"`` blocks: e.g. Σ_11 = Φ^(1)⊗I + (1/d_1)Φ^(2)⊗11ᵀ (Eq. 125)
has Φ^(1) = M_std1[W_1, W_1] and Φ^(1) + Φ^(2) = M_trivial[W_1, W_1]. This basis is the
*normalised* one (u = 1/√d, P = 11ᵀ/d), which the surrogate needs (notes 002 §2.4, erratum 3);
it also contains the two blocks Theorem 3.2 gets wrong for L ≥ 3 (errata 1–2): Σ_1L is a general
d_0 × d_L matrix Ω/√(d_1 d_{L−1}) (``"trivial"`` block between W_1 and W_L) and the b_1–W_L block
exists (``"trivial"`` block between b_1 and W_L). The tests check the dimensions against a
numerical commutant (:func:`paramsym.symo.group.numerical_commutant`).

**Layout.** Dense matrices use :func:`paramsym.flatten`'s order (the model's parameter order,
each tensor row-major, so W[i, j] is at ``i·d_{ℓ−1} + j``). The paper's figures use column-major
Vec; :meth:`CurvatureStructure.paper_order` gives the permutation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Literal

import torch
from torch import Tensor, nn

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError
from paramsym.symo.layout import GroupChoice, GroupName, MLPLayout

AxisRole = Literal["external", "def", "one", "std"]
"""What one axis of a parameter tensor contributes: an input/output index (a copy index), the
whole hidden space (``"def"``), its mean (``"one"``) or its centred part (``"std"``)."""


@dataclass(frozen=True)
class Component:
    """The copies of one type that one parameter tensor contributes.

    Attributes:
        name: the parameter name.
        roles: the role of each axis of the parameter (rows, then columns for a weight).
        layers: the layer index 0..L of each axis (a weight's rows are layer ℓ, columns ℓ−1).
        sizes: the size of each axis.
        copies: the number of copies (product of the external axis sizes).
    """

    name: str
    roles: tuple[AxisRole, ...]
    layers: tuple[int, ...]
    sizes: tuple[int, ...]
    copies: int

    @property
    def kept(self) -> tuple[int, ...]:
        """Axes left after the ``"one"`` axes are contracted, in tensor order."""
        return tuple(a for a, r in enumerate(self.roles) if r != "one")

    @property
    def order(self) -> tuple[int, ...]:
        """Kept axes in coordinate order: external (copy) axes, then hidden axes by layer."""
        external = [a for a in self.kept if self.roles[a] == "external"]
        hidden = sorted((a for a in self.kept if self.roles[a] != "external"), key=self._layer)
        return (*external, *hidden)

    def _layer(self, axis: int) -> int:
        return self.layers[axis]


@dataclass(frozen=True)
class BlockType:
    """One type of irreducible representation, its copies and its factor matrix's size.

    Attributes:
        key: e.g. ``"def1"``, ``"std1*std2"``, ``"trivial"``.
        pieces: the non-trivial ``(layer, piece)`` pairs, by layer.
        shape: the coordinate shape of one copy (the widths of the layers in ``pieces``).
        dim: the dimension of the irreducible representation (how often each eigenvalue of the
            factor matrix repeats in the full matrix).
        components: where the copies come from, in parameter order.
    """

    key: str
    pieces: tuple[tuple[int, str], ...]
    shape: tuple[int, ...]
    dim: int
    components: tuple[Component, ...]

    @property
    def multiplicity(self) -> int:
        """n_τ, the number of copies: the factor matrix is ``n_τ × n_τ``."""
        return sum(c.copies for c in self.components)

    @property
    def width(self) -> int:
        """D, the number of coordinates of one copy (``prod(shape)``; ≥ ``dim``)."""
        return math.prod(self.shape)

    def span(self, name: str) -> tuple[int, int]:
        """``(start, stop)`` of parameter ``name``'s copies among the n_τ rows."""
        start = 0
        for c in self.components:
            if c.name == name:
                return start, start + c.copies
            start += c.copies
        names = [c.name for c in self.components]
        raise InvalidArgumentError(
            f"type {self.key!r} has no copies from parameter {name!r}; it has {names}"
        )


class CurvatureStructure:
    """The invariant-matrix structure of one MLP (see the module docstring).

    Build it from a model (``CurvatureStructure.from_model(model)``) or from widths
    (``CurvatureStructure.from_widths([5, 5, 5], "signed_permutation")``).

    >>> s = CurvatureStructure.from_widths([3, 4, 2], "signed_permutation", bias=False)
    >>> [(t.key, t.multiplicity, t.dim) for t in s.types], s.num_factors
    ([('def1', 5, 4)], 15)
    >>> s = CurvatureStructure.from_widths([3, 3, 3, 2], "permutation", bias=False)
    >>> [(t.key, t.multiplicity) for t in s.types], s.num_factors
    ([('trivial', 6), ('std1', 4), ('std2', 3), ('std1*std2', 1)], 38)
    """

    def __init__(self, layout: MLPLayout) -> None:
        self.layout = layout
        self.types: tuple[BlockType, ...] = _decompose(layout)
        self._by_key = {t.key: t for t in self.types}

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def from_model(
        cls, model: nn.Module, group: GroupChoice | Sequence[GroupChoice] = "auto"
    ) -> CurvatureStructure:
        """The structure of an MLP (see :meth:`MLPLayout.from_model` for what is accepted)."""
        return cls(MLPLayout.from_model(model, group))

    @classmethod
    def from_widths(
        cls,
        widths: Sequence[int],
        group: GroupName | Sequence[GroupName],
        *,
        bias: bool | Sequence[bool] = True,
    ) -> CurvatureStructure:
        """The structure of ``ps.mlp(widths, bias=bias)`` under ``group``."""
        return cls(MLPLayout.from_widths(widths, group, bias=bias))

    def with_hidden_widths(self, hidden: Sequence[int]) -> CurvatureStructure:
        """The same network with other hidden widths (same factor shapes where every piece
        survives, see :attr:`surrogate_widths`)."""
        return CurvatureStructure(self.layout.with_hidden_widths(hidden))

    @property
    def surrogate_widths(self) -> tuple[int, ...]:
        """The smallest hidden widths with the same factors (Eq. 200): 1 for O(d) and B(d),
        2 for S(d) (1 if the layer itself has width 1)."""
        widths = self.layout.widths
        return tuple(
            1 if g != "permutation" else min(2, widths[k])
            for k, g in enumerate(self.layout.groups, 1)
        )

    def surrogate(self) -> CurvatureStructure:
        """The structure at :attr:`surrogate_widths` (App. L)."""
        return self.with_hidden_widths(self.surrogate_widths)

    def same_factors(self, other: CurvatureStructure) -> bool:
        """Whether ``other`` has the same types with the same multiplicities (so factors of
        one are factors of the other)."""
        mine = [(t.key, [(c.name, c.copies) for c in t.components]) for t in self.types]
        theirs = [(t.key, [(c.name, c.copies) for c in t.components]) for t in other.types]
        return mine == theirs

    # -- sizes -----------------------------------------------------------------------------
    def type(self, key: str) -> BlockType:
        """The type named ``key``."""
        if key not in self._by_key:
            raise InvalidArgumentError(
                f"no block type {key!r} in this structure; types: {list(self._by_key)}"
            )
        return self._by_key[key]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(t.key for t in self.types)

    @property
    def num_params(self) -> int:
        """P, the size of the full matrix."""
        return self.layout.num_params

    @property
    def num_factors(self) -> int:
        """Free entries of a *symmetric* invariant matrix: Σ_τ n_τ(n_τ+1)/2."""
        return sum(t.multiplicity * (t.multiplicity + 1) // 2 for t in self.types)

    @property
    def commutant_dimension(self) -> int:
        """Dimension of all (not only symmetric) invariant matrices: Σ_τ n_τ²."""
        return sum(t.multiplicity**2 for t in self.types)

    @property
    def surrogate_size(self) -> int:
        """Σ_τ n_τ: the size of the surrogate matrix (Eq. 202) and of the block diagonal."""
        return sum(t.multiplicity for t in self.types)

    @property
    def mean_dimension(self) -> int:
        """Free entries of an invariant vector (Eqs. 26–28, 113–117): the copies of the
        trivial type."""
        return self._by_key["trivial"].multiplicity if "trivial" in self._by_key else 0

    # -- vectors ---------------------------------------------------------------------------
    def batch_shape(self, v: Mapping[str, Tensor], what: str = "v") -> tuple[int, ...]:
        """Check that ``v`` has every parameter, each of shape ``(*batch, *param_shape)`` with
        one common ``batch``; return ``batch``."""
        batch: tuple[int, ...] | None = None
        for name in self.layout.parameter_names:
            if name not in v:
                raise MissingParameterError(
                    f"{what}: no entry for parameter '{name}' (got {sorted(v)[:6]}); pass a "
                    "params dict of the model the structure was built for"
                )
            shape = self.layout.shape(name)
            t = v[name]
            if tuple(t.shape[t.ndim - len(shape) :]) != shape or t.ndim < len(shape):
                raise ShapeError(
                    f"{what}['{name}'] has shape {tuple(t.shape)}, expected (..., "
                    f"{', '.join(map(str, shape))})"
                )
            here = tuple(t.shape[: t.ndim - len(shape)])
            if batch is None:
                batch = here
            elif here != batch:
                raise ShapeError(
                    f"{what}: parameters have different leading (batch) shapes {batch} and "
                    f"{here} ('{name}')"
                )
        return batch or ()

    def flatten(self, v: Mapping[str, Tensor]) -> Tensor:
        """Concatenate ``v`` in :func:`paramsym.flatten` order: shape ``(*batch, P)``."""
        batch = self.batch_shape(v)
        return torch.cat([v[n].reshape(*batch, -1) for n in self.layout.parameter_names], -1)

    def unflatten(self, x: Tensor) -> Params:
        """Split ``x`` of shape ``(*batch, P)`` into a params dict (views)."""
        if x.ndim < 1 or x.shape[-1] != self.num_params:
            raise ShapeError(
                f"unflatten: expected shape (..., {self.num_params}), got {tuple(x.shape)}"
            )
        out: Params = {}
        offset = 0
        for name in self.layout.parameter_names:
            shape = self.layout.shape(name)
            size = math.prod(shape)
            out[name] = x[..., offset : offset + size].reshape(*x.shape[:-1], *shape)
            offset += size
        return out

    def coordinates(self, v: Mapping[str, Tensor], keys: Iterable[str] | None = None) -> Params:
        """Q_τᵀ v for each type τ: ``{key: tensor of shape (*batch, n_τ, D_τ)}``.

        Row a of type τ is copy a (in the order of :attr:`BlockType.components`); its ``D_τ``
        entries are the copy's coordinates in the hidden index space(s), centred along
        ``"std"`` axes. For odd activations and L = 2 without bias, ``"def1"`` is the stacked
        matrix ``V = [G_1ᵀ; G_2]`` of notes 002 §2.5.
        """
        batch = self.batch_shape(v)
        chosen = self.types if keys is None else tuple(self.type(k) for k in keys)
        out: Params = {}
        for t in chosen:
            parts = [_component_coordinates(v[c.name], c, len(batch)) for c in t.components]
            out[t.key] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-2)
        return out

    def assemble(self, coords: Mapping[str, Tensor]) -> Params:
        """Σ_τ Q_τ c_τ: the params dict with the given coordinates (the adjoint of
        :meth:`coordinates`; types missing from ``coords`` contribute zero)."""
        out: dict[str, Tensor] = {}
        batch: tuple[int, ...] | None = None
        for key, c in coords.items():
            t = self.type(key)
            expected = (t.multiplicity, t.width)
            if c.ndim < 2 or tuple(c.shape[-2:]) != expected:
                raise ShapeError(
                    f"assemble: coordinates of type {key!r} must have shape (..., "
                    f"{expected[0]}, {expected[1]}), got {tuple(c.shape)}"
                )
            batch = tuple(c.shape[:-2])
            start = 0
            for comp in t.components:
                part = _component_assemble(c[..., start : start + comp.copies, :], comp, t)
                start += comp.copies
                out[comp.name] = part if comp.name not in out else out[comp.name] + part
        if batch is None:
            raise InvalidArgumentError("assemble: no coordinates given")
        like = next(iter(coords.values()))
        result: Params = {}
        for name in self.layout.parameter_names:
            if name in out:
                result[name] = out[name]
            else:
                shape = self.layout.shape(name)
                result[name] = like.new_zeros(*batch, *shape)
        return result

    def invariant_vector(self, mean: Tensor) -> Params:
        """The invariant params dict whose trivial coordinates are ``mean`` (shape
        ``(*batch, mean_dimension)``): the structured mean gradient of Eqs. 26–28, 113–117."""
        if mean.ndim < 1 or mean.shape[-1] != self.mean_dimension:
            raise ShapeError(
                f"invariant_vector: mean must have shape (..., {self.mean_dimension}), got "
                f"{tuple(mean.shape)}"
            )
        if self.mean_dimension == 0:  # no invariant direction: the mean gradient is zero
            batch = tuple(mean.shape[:-1])
            return {
                n: mean.new_zeros(*batch, *self.layout.shape(n))
                for n in self.layout.parameter_names
            }
        return self.assemble({"trivial": mean.unsqueeze(-1)})

    # -- presentation ----------------------------------------------------------------------
    def block_boundaries(self) -> list[tuple[str, int, int]]:
        """``(parameter name, start, stop)`` of each parameter in the flattened vector, for
        the tick marks of the covariance heatmaps (Figs. 2–4)."""
        out = []
        offset = 0
        for name in self.layout.parameter_names:
            size = math.prod(self.layout.shape(name))
            out.append((name, offset, offset + size))
            offset += size
        return out

    def paper_order(self) -> Tensor:
        """Index ``perm`` such that ``flat[perm]`` is the paper's column-major
        Vec(W_1, b_1, …, W_L, b_L) (Eq. 16); reorder a matrix with ``M[perm][:, perm]``."""
        pieces = []
        for name, start, stop in self.block_boundaries():
            shape = self.layout.shape(name)
            index = torch.arange(start, stop)
            if len(shape) == 2:
                index = index.reshape(shape).T.reshape(-1)
            pieces.append(index)
        return torch.cat(pieces)

    def describe(self) -> str:
        """One line per type: key, copies (by parameter), irreducible dimension."""
        lines = []
        for t in self.types:
            parts = ", ".join(f"{c.name}×{c.copies}" for c in t.components)
            lines.append(f"{t.key}: n={t.multiplicity} ({parts}), repeated {t.dim}×")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"CurvatureStructure(widths={self.layout.widths}, groups={self.layout.groups}, "
            f"types={list(self.keys)}, factors={self.num_factors}, P={self.num_params})"
        )


# -- the decomposition -------------------------------------------------------------------------


def _roles(layout: MLPLayout, layer: int) -> list[AxisRole]:
    """The roles an axis indexed by ``layer`` can take."""
    if layer in (0, layout.num_layers):
        return ["external"]
    group = layout.groups[layer - 1]
    if group != "permutation":
        return ["def"]
    return ["one", "std"] if layout.widths[layer] >= 2 else ["one"]


def _type_key(pieces: tuple[tuple[int, str], ...]) -> str:
    return "*".join(f"{piece}{layer}" for layer, piece in pieces) if pieces else "trivial"


def _decompose(layout: MLPLayout) -> tuple[BlockType, ...]:
    widths = layout.widths
    found: dict[str, list[Component]] = {}
    info: dict[str, tuple[tuple[tuple[int, str], ...], tuple[int, ...], int]] = {}
    for layer in range(1, layout.num_layers + 1):
        tensors: list[tuple[str, tuple[int, ...]]] = [
            (layout.weight_names[layer - 1], (layer, layer - 1))
        ]
        bias = layout.bias_names[layer - 1]
        if bias is not None:
            tensors.append((bias, (layer,)))
        for name, axis_layers in tensors:
            sizes = tuple(widths[k] for k in axis_layers)
            for roles in product(*(_roles(layout, k) for k in axis_layers)):
                pieces = tuple(
                    sorted(
                        (k, r)
                        for k, r in zip(axis_layers, roles, strict=True)
                        if r in ("def", "std")
                    )
                )
                copies = math.prod(s for s, r in zip(sizes, roles, strict=True) if r == "external")
                key = _type_key(pieces)
                found.setdefault(key, []).append(
                    Component(name, tuple(roles), axis_layers, sizes, copies)
                )
                shape = tuple(widths[k] for k, _ in pieces)
                dim = math.prod(widths[k] - (1 if p == "std" else 0) for k, p in pieces)
                info[key] = (pieces, shape, dim)
    return tuple(
        BlockType(key, info[key][0], info[key][1], info[key][2], tuple(components))
        for key, components in found.items()
    )


def _component_coordinates(t: Tensor, comp: Component, nb: int) -> Tensor:
    """One component's copies: ``(*batch, copies, D)`` (see :meth:`coordinates`)."""
    x = t
    for axis, role in enumerate(comp.roles):
        if role == "std":
            x = x - x.mean(dim=nb + axis, keepdim=True)
    for axis in reversed(range(len(comp.roles))):
        if comp.roles[axis] == "one":
            x = x.sum(dim=nb + axis) / math.sqrt(comp.sizes[axis])
    kept = comp.kept
    order = comp.order
    if order != kept:
        x = x.permute(*range(nb), *(nb + kept.index(a) for a in order))
    return x.reshape(*t.shape[:nb], comp.copies, -1)


def _component_assemble(c: Tensor, comp: Component, block: BlockType) -> Tensor:
    """The adjoint of :func:`_component_coordinates`: ``(*batch, copies, D)`` to the
    parameter's shape ``(*batch, *sizes)``."""
    batch = tuple(c.shape[:-2])
    nb = len(batch)
    kept, order = comp.kept, comp.order
    x = c.reshape(batch + tuple(comp.sizes[a] for a in order))
    if order != kept:
        x = x.permute(*range(nb), *(nb + order.index(a) for a in kept))
    for axis, role in enumerate(comp.roles):
        if role == "one":
            size = comp.sizes[axis]
            x = x.unsqueeze(nb + axis).expand(
                *x.shape[: nb + axis], size, *x.shape[nb + axis :]
            ) / math.sqrt(size)
    for axis, role in enumerate(comp.roles):
        if role == "std":
            x = x - x.mean(dim=nb + axis, keepdim=True)
    return x
