"""The symmetry group of an MLP as dense matrices: random elements, the action on parameters,
generators, and the numerical commutant the closed forms are checked against.

An element is a tuple ``(V_1, …, V_{L−1})`` of ``d_ℓ × d_ℓ`` orthogonal matrices, one per hidden
layer, acting by ``W_ℓ ↦ V_ℓ W_ℓ V_{ℓ−1}ᵀ`` and ``b_ℓ ↦ V_ℓ b_ℓ`` with V_0 = V_L = I (seed 002,
Eqs. 6–7); on the flattened vector this is the orthogonal matrix G of Eq. 17 (:func:`dense_action`).
Permutations and sign flips are the same maps as :class:`~paramsym.symmetry.NeuronPermutation`
and :class:`~paramsym.symmetry.SignFlip` (the tests check that); this module adds O(d) for
linear layers and the dense forms needed for invariance tests and Monte-Carlo projections.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symo.layout import GroupName
from paramsym.symo.structure import CurvatureStructure

Element = tuple[Tensor, ...]
"""``(V_1, …, V_{L−1})``: one orthogonal ``d_ℓ × d_ℓ`` matrix per hidden layer."""


def identity_element(structure: CurvatureStructure, dtype: torch.dtype = torch.float64) -> Element:
    """The identity ``(I_{d_1}, …, I_{d_{L−1}})``."""
    return tuple(torch.eye(d, dtype=dtype) for d in structure.layout.widths[1:-1])


def haar_orthogonal(d: int, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
    """A Haar-distributed ``d × d`` orthogonal matrix (QR of a Gaussian with the sign fix of
    Mezzadri 2007)."""
    q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1.0
    return (q * signs).to(dtype)


def _random_factor(
    group: GroupName, d: int, generator: torch.Generator, dtype: torch.dtype
) -> Tensor:
    if group == "orthogonal":
        return haar_orthogonal(d, generator, dtype)
    matrix = torch.eye(d, dtype=dtype)[torch.randperm(d, generator=generator)]
    if group == "signed_permutation":
        signs = 2.0 * torch.randint(0, 2, (d,), generator=generator).to(dtype) - 1.0
        matrix = signs[:, None] * matrix
    return matrix


def random_element(
    structure: CurvatureStructure,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    group: GroupName | None = None,
) -> Element:
    """A uniformly random element (Haar for O(d)) of the structure's group, or of ``group``
    on every hidden layer if given (e.g. to show that sign flips are *not* a symmetry of a
    ReLU net)."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    layout = structure.layout
    return tuple(
        _random_factor(group or g, d, gen, dtype)
        for g, d in zip(layout.groups, layout.widths[1:-1], strict=True)
    )


def _check_element(structure: CurvatureStructure, element: Sequence[Tensor]) -> None:
    widths = structure.layout.widths[1:-1]
    if len(element) != len(widths):
        raise ShapeError(
            f"group element: expected {len(widths)} matrices (one per hidden layer), got "
            f"{len(element)}"
        )
    for k, (v, d) in enumerate(zip(element, widths, strict=True), 1):
        if tuple(v.shape) != (d, d):
            raise ShapeError(
                f"group element: V_{k} must have shape ({d}, {d}), got {tuple(v.shape)}"
            )


def act(
    structure: CurvatureStructure, params: Mapping[str, Tensor], element: Sequence[Tensor]
) -> Params:
    """``G·θ``: ``W_ℓ ↦ V_ℓ W_ℓ V_{ℓ−1}ᵀ``, ``b_ℓ ↦ V_ℓ b_ℓ`` (Eqs. 6–7). ``params`` may have
    leading batch dimensions; gradients transform the same way (Eq. 82, G is orthogonal)."""
    _check_element(structure, element)
    structure.batch_shape(params, "act: params")
    layout = structure.layout
    out = dict(params)
    for layer in range(1, layout.num_layers + 1):
        left = element[layer - 1] if layer < layout.num_layers else None
        right = element[layer - 2] if layer >= 2 else None
        w_name = layout.weight_names[layer - 1]
        w = params[w_name]
        if left is not None:
            w = left.to(w) @ w
        if right is not None:
            w = w @ right.to(w).T
        out[w_name] = w
        b_name = layout.bias_names[layer - 1]
        if b_name is not None and left is not None:
            out[b_name] = params[b_name] @ left.to(params[b_name]).T
    return out


def dense_action(structure: CurvatureStructure, element: Sequence[Tensor]) -> Tensor:
    """The ``P × P`` orthogonal matrix G of Eq. 17 in :func:`paramsym.flatten` order."""
    dtype = element[0].dtype if element else torch.float64
    eye = torch.eye(structure.num_params, dtype=dtype)
    columns = act(structure, structure.unflatten(eye), element)
    return structure.flatten(columns).T


def generators(
    structure: CurvatureStructure,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
) -> list[Element]:
    """Elements that generate the group (a dense subgroup for O(d)), each acting on one hidden
    layer: for S(d) a transposition and a d-cycle; B(d) adds a sign flip; O(d) uses a
    reflection and two Haar-random elements (which generate a dense subgroup almost surely,
    enough for the commutant)."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    layout = structure.layout
    widths = layout.widths[1:-1]
    out: list[Element] = []
    for k, (group, d) in enumerate(zip(layout.groups, widths, strict=True)):
        factors: list[Tensor] = []
        if group == "orthogonal":
            reflection = torch.eye(d, dtype=dtype)
            reflection[0, 0] = -1.0
            factors = [reflection, haar_orthogonal(d, gen, dtype), haar_orthogonal(d, gen, dtype)]
        else:
            if d >= 2:
                swap = list(range(d))
                swap[0], swap[1] = 1, 0
                factors.append(torch.eye(d, dtype=dtype)[swap])
                factors.append(torch.eye(d, dtype=dtype)[[*range(1, d), 0]])
            if group == "signed_permutation":
                flip = torch.eye(d, dtype=dtype)
                flip[0, 0] = -1.0
                factors.append(flip)
        for f in factors:
            element = list(identity_element(structure, dtype))
            element[k] = f
            out.append(tuple(element))
    return out


def group_elements(
    structure: CurvatureStructure, dtype: torch.dtype = torch.float64
) -> Iterator[Element]:
    """Every element of a finite group (permutations and signed permutations only), for
    exact group averages on tiny networks: Π_ℓ d_ℓ! (times 2^{d_ℓ}) elements."""
    layout = structure.layout
    if "orthogonal" in layout.groups:
        raise InvalidArgumentError("group_elements: O(d) is not finite; use random_element")
    per_layer: list[list[Tensor]] = []
    for group, d in zip(layout.groups, layout.widths[1:-1], strict=True):
        eye = torch.eye(d, dtype=dtype)
        perms = [eye[list(p)] for p in itertools.permutations(range(d))]
        if group == "signed_permutation":
            signs = [torch.tensor(s, dtype=dtype) for s in itertools.product((1.0, -1.0), repeat=d)]
            perms = [s[:, None] * p for p in perms for s in signs]
        per_layer.append(perms)
    size = math.prod(len(p) for p in per_layer)
    if size > 200_000:
        raise InvalidArgumentError(
            f"group_elements: the group has {size} elements; use smaller hidden widths"
        )
    yield from itertools.product(*per_layer)


def numerical_commutant(
    structure: CurvatureStructure,
    elements: Sequence[Sequence[Tensor]] | None = None,
    *,
    symmetric: bool = False,
    method: str = "auto",
    tol: float = 1e-9,
    max_params: int = 60,
) -> Tensor:
    """An orthonormal basis (Frobenius inner product) of ``{X : G X Gᵀ = X for all given G}``
    (of its symmetric matrices if ``symmetric``), shape ``(k, P, P)``, computed without the
    closed forms from the ``elements`` (default :func:`generators`):

    * ``method="nullspace"``: the null space of Σ_G (G⊗G − I)ᵀ(G⊗G − I) =
      Σ_G (2I − G⊗G − Gᵀ⊗Gᵀ) by an eigendecomposition (P² unknowns, P(P+1)/2 if symmetric);
    * ``method="orbits"`` (signed permutation matrices G only): the same null space read off
      the orbits of index pairs, (G X Gᵀ)[π(i), π(j)] = s_i s_j X[i, j] — one basis matrix per
      orbit whose signs are consistent (fast, exact);
    * ``"auto"``: orbits when every G is a signed permutation, else the null space.

    Only for small networks (``max_params``)."""
    p = structure.num_params
    if p > max_params:
        raise InvalidArgumentError(
            f"numerical_commutant: {p} parameters > max_params={max_params} (P⁴ memory)"
        )
    elements = list(elements) if elements is not None else generators(structure)
    dense = [dense_action(structure, [v.to(torch.float64) for v in e]) for e in elements]
    monomial = [_signed_permutation(g) for g in dense]
    if method == "auto":
        method = "orbits" if all(m is not None for m in monomial) else "nullspace"
    if method == "orbits":
        if any(m is None for m in monomial):
            raise InvalidArgumentError(
                "numerical_commutant: method='orbits' needs signed permutation matrices"
            )
        return _orbit_basis([m for m in monomial if m is not None], p, symmetric)
    if method == "nullspace":
        return _nullspace_basis(dense, p, symmetric, tol)
    raise InvalidArgumentError(
        f"numerical_commutant: method must be 'auto', 'orbits' or 'nullspace', got {method!r}"
    )


def _signed_permutation(g: Tensor) -> tuple[list[int], list[float]] | None:
    """``(π, s)`` with ``G e_j = s_j e_{π(j)}`` if ``g`` is a signed permutation matrix."""
    nonzero = g != 0
    if not bool((nonzero.sum(0) == 1).all()):
        return None
    target = nonzero.to(torch.int64).argmax(0)
    signs = g[target, torch.arange(g.shape[1])]
    if not bool((signs.abs() == 1).all()):
        return None
    return target.tolist(), signs.tolist()


def _orbit_basis(maps: list[tuple[list[int], list[float]]], p: int, symmetric: bool) -> Tensor:
    """Union-find with signs over the P² entries: X[π(i), π(j)] = s_i s_j X[i, j] for every
    map (and X[j, i] = X[i, j] if ``symmetric``); inconsistent orbits are forced to zero."""
    parent = list(range(p * p))
    sign = [1.0] * (p * p)  # X[node] = sign[node] · X[parent[node]]
    broken = [False] * (p * p)

    def find(x: int) -> tuple[int, float]:
        s = 1.0
        while parent[x] != x:
            s *= sign[x]
            x = parent[x]
        return x, s

    def link(a: int, b: int, s: float) -> None:  # X[b] = s · X[a]
        ra, sa = find(a)
        rb, sb = find(b)
        if ra == rb:
            broken[ra] = broken[ra] or sb != s * sa
            return
        parent[rb], sign[rb] = ra, s * sa * sb
        broken[ra] = broken[ra] or broken[rb]

    for target, signs in maps:
        for i in range(p):
            for j in range(p):
                link(i * p + j, target[i] * p + target[j], signs[i] * signs[j])
    if symmetric:
        for i in range(p):
            for j in range(i + 1, p):
                link(i * p + j, j * p + i, 1.0)
    orbits: dict[int, list[tuple[int, float]]] = {}
    for node in range(p * p):
        root, s = find(node)
        orbits.setdefault(root, []).append((node, s))
    vectors = []
    for root, members in orbits.items():
        if broken[root]:
            continue
        v = torch.zeros(p * p, dtype=torch.float64)
        for node, s in members:
            v[node] = s
        vectors.append(v / len(members) ** 0.5)
    if not vectors:
        return torch.zeros(0, p, p, dtype=torch.float64)
    return torch.stack(vectors).reshape(-1, p, p)


def _nullspace_basis(dense: list[Tensor], p: int, symmetric: bool, tol: float) -> Tensor:
    gram = 2 * len(dense) * torch.eye(p * p, dtype=torch.float64)
    for g in dense:
        kron = torch.kron(g, g)
        gram -= kron + kron.T
    if symmetric:
        # orthonormal basis of symmetric matrices: (E_ij + E_ji) s, s = 1/√2 (i < j), 1/2 (i = j)
        rows, cols = torch.triu_indices(p, p)
        first, second = rows * p + cols, cols * p + rows
        scale = torch.where(rows == cols, 0.5, 2**-0.5).to(torch.float64)
        half = gram[first] + gram[second]
        gram = (half[:, first] + half[:, second]) * scale[:, None] * scale[None, :]
    values, vectors = torch.linalg.eigh(gram)
    null = vectors[:, values < tol * max(1.0, float(values.max()))]
    if not symmetric:
        return null.T.reshape(-1, p, p)
    basis = torch.zeros(null.shape[1], p * p, dtype=torch.float64)
    basis[:, first] = null.T * scale
    basis[:, second] += null.T * scale
    return basis.reshape(-1, p, p)


def reynolds_projection(basis: Tensor, matrix: Tensor) -> Tensor:
    """The orthogonal projection of ``matrix`` onto the span of an orthonormal ``basis`` —
    with :func:`numerical_commutant`, the group average of ``matrix`` (a dense oracle)."""
    coefficients = torch.einsum("kij,ij->k", basis, matrix.to(basis))
    return torch.einsum("k,kij->ij", coefficients, basis)
