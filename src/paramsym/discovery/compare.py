"""Discovered symmetries against the catalogue, and the Lie-bracket closure of what was found.

Both are compared as *tangent fields* at common parameter points: a generator A gives the
field θ ↦ Aθ, a catalogued continuous symmetry s the fields θ ↦ ``s.tangent(θ, e_j)``
(j < s.dim). Evaluated at the m points θ_1 … θ_m that discovery sampled and stacked into
vectors of length m·P, each set spans a subspace; their principal angles (Björck and Golub)
say how far apart they are:

* a discovered direction outside the catalogue's span is something the catalogue misses;
* a catalogued direction outside the discovered span is something discovery misses, either
  because it is not expressible in the ansatz (its residual outside the ansatz's own span at
  the points is reported where that span is computable) or because discovery failed.

Closure: an algebra is closed under brackets. For each pair of discovered generators the
commutator [A_i, A_j] = A_iA_j − A_jA_i (in the ansatz's coefficients when the ansatz is
closed under brackets, as gl(P) and the layer pairs are; as P × P matrices otherwise) is
projected onto the discovered span; the relative residual should be at rounding level.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.linalg import svd
from paramsym.discovery.ansatz import MATRIX_LIMIT, Ansatz
from paramsym.discovery.result import DiscoveredGenerator, DiscoveryResult
from paramsym.errors import InvalidArgumentError, ParamsymError
from paramsym.symmetry.base import Symmetry

SPAN_RTOL = 1e-10
"""Relative singular value below which a stacked tangent direction counts as absent."""

ANSATZ_SPAN_LIMIT = 5 * 10**7
"""Largest (m·P) × K ansatz image computed to tell 'outside the ansatz' from 'missed'."""


@dataclass
class ClosureReport:
    """Brackets of discovered generators projected onto the discovered span."""

    pairs: int
    max_residual: float
    mean_residual: float
    closed: bool
    tol: float
    method: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SymmetryOverlap:
    """One catalogued symmetry against the discovered algebra."""

    name: str
    group: str
    dim: int
    residual: float
    """max over its basis of ‖(I − Π) t‖ / ‖t‖, t its tangent field stacked over the points and
    Π the projection onto the discovered fields."""
    orbit_residual: float
    """the same, point by point against the discovered tangent space at each point (max)."""
    outside_ansatz: float | None
    """``residual`` against all of the ansatz's fields (``None``: not computed)."""


@dataclass
class CatalogueComparison:
    """The discovered algebra against the catalogue's (module docstring).

    Two levels: *fields* stacked over the points compare the algebras (a θ-dependent
    combination of catalogued generators is a different field); *orbits* compare the tangent
    spaces point by point (what the group moves through at each θ). Dimensions of orbits are
    the largest over the points.
    """

    dim_discovered: int
    dim_catalogue: int
    dim_common: int
    catalogue_misses: int
    discovery_misses: int
    discovery_misses_in_ansatz: int | None
    principal_angles: list[float]
    orbit_dim_discovered: int
    orbit_dim_catalogue: int
    orbit_catalogue_misses: int
    orbit_discovery_misses: int
    orbit_principal_angles: list[float]
    generator_residuals: list[float]
    symmetries: list[SymmetryOverlap]
    closure: ClosureReport | None
    points: int
    tol: float
    skipped: list[str] = field(default_factory=list)
    """Catalogued symmetries left out, with the reason (e.g. a single-input action on a batch)."""
    missed_by_catalogue: list[DiscoveredGenerator] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("missed_by_catalogue", "closure")}
        out["closure"] = None if self.closure is None else self.closure.to_dict()
        return out


def _columns(result: DiscoveryResult, start: int, stop: int) -> Tensor:
    c = result.coefficients
    if c.is_sparse:
        return c.index_select(1, torch.arange(start, stop)).to_dense()
    return c[:, start:stop]


def _discovered_fields(result: DiscoveryResult, ansatz: Ansatz, theta: Tensor) -> Tensor:
    d = result.dim_estimate
    chunk = max(1, 2**24 // max(1, ansatz.size))
    parts = [
        ansatz.field(_columns(result, j, min(d, j + chunk)).to(theta.dtype), theta)
        for j in range(0, d, chunk)
    ]
    return torch.cat(parts, dim=1) if parts else theta.new_zeros(theta.numel(), 0)


def _orthonormal(vectors: Tensor, rtol: float = SPAN_RTOL) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(Q, U, S, Vh) of ``vectors`` (n, k): Q spans its numerically non-zero columns."""
    if vectors.shape[1] == 0:
        empty = vectors.new_zeros(0)
        return vectors, vectors, empty, vectors.new_zeros(0, 0)
    u, s, vh = svd(vectors, full_matrices=False)
    rank = int((s > s[0] * rtol).sum()) if float(s[0]) > 0 else 0
    return u[:, :rank], u, s, vh


def orthonormal_basis(vectors: Tensor, rtol: float = SPAN_RTOL) -> Tensor:
    """An orthonormal basis (n, r) of the span of the columns of ``vectors`` (n, k): r is the
    number of singular values above ``rtol`` times the largest (the input of
    :func:`principal_angles`)."""
    return _orthonormal(vectors, rtol)[0]


def _outside(q: Tensor, vectors: Tensor) -> Tensor:
    """Per column, ‖(I − QQᵀ) v‖ / ‖v‖."""
    rest = vectors - q @ (q.T @ vectors) if q.shape[1] else vectors
    return rest.norm(dim=0) / vectors.norm(dim=0).clamp_min(1e-300)


def compare_to_catalogue(
    result: DiscoveryResult,
    model: nn.Module,
    example_input: Any = None,
    *,
    symmetries: Sequence[Symmetry] | None = None,
    loss_fn: Callable[..., Any] | None = None,
    tol: float = 1e-8,
) -> CatalogueComparison:
    """Set the discovered algebra against the catalogue's continuous symmetries.

    Args:
        result: a :func:`~paramsym.discovery.discover_symmetries` result.
        model: the same model.
        example_input: passed to :func:`paramsym.symmetries` (traced detection).
        symmetries: the catalogue to compare with (default: ``ps.symmetries(model, ...)``,
            with the data-dependent actions when the result is data-dependent; those are
            evaluated on the result's fixed batch).
        loss_fn: passed to :func:`paramsym.symmetries` (a cross-entropy adds the softmax
            translation).
        tol: a direction is in a span when its relative residual outside it is ≤ ``tol``;
            two spans share the directions whose principal angle has sine ≤ ``tol``.
    """
    ansatz = result.ansatz_object
    if ansatz is None or not result.points:
        raise InvalidArgumentError(
            "compare_to_catalogue: the result carries no ansatz or sampled points"
        )
    if symmetries is None:
        from paramsym.symmetry.detect import symmetries as detect

        symmetries = detect(
            model, example_input, data_dependent=result.data_dependent, loss_fn=loss_fn
        )
    batch_x = result.batch[0] if result.batch is not None else None
    x = batch_x if isinstance(batch_x, Tensor) else None  # data-dependent actions take a tensor
    continuous = [s for s in symmetries if s.dim > 0 and (not s.data_dependent or x is not None)]
    skipped = [
        f"{s.name}: a data-dependent action needs a tensor batch, not keyword inputs"
        for s in symmetries
        if s.dim > 0 and s.data_dependent and isinstance(batch_x, dict)
    ]
    for s in list(continuous):  # an action that cannot act on this batch is left out, named
        try:
            s.tangent(
                result.points[0],
                torch.zeros(s.dim, dtype=torch.float64),
                x if s.data_dependent else None,
            )
        except ParamsymError as error:
            skipped.append(f"{s.name}: {error}")
            continuous.remove(s)
    discovered_parts, catalogue_parts = [], []
    for point in result.points:
        theta = ansatz.flatten(point)
        discovered_parts.append(_discovered_fields(result, ansatz, theta))
        columns = []
        for s in continuous:
            eye = torch.eye(s.dim, dtype=theta.dtype)
            for j in range(s.dim):
                tangent = s.tangent(point, eye[j], x if s.data_dependent else None)
                columns.append(ansatz.flatten(tangent))
        catalogue_parts.append(
            torch.stack(columns, dim=1) if columns else theta.new_zeros(theta.numel(), 0)
        )
    found = torch.cat(discovered_parts)
    known = torch.cat(catalogue_parts)
    q_found, _, s_found, vh_found = _orthonormal(found)
    q_known = _orthonormal(known)[0]
    angles = principal_angles(q_found, q_known)
    common = _shared(angles, tol)

    orbit = _orbits(discovered_parts, catalogue_parts, tol)
    ansatz_q = _ansatz_span(ansatz, result.points)
    in_ansatz_misses = None
    if ansatz_q is not None:
        in_ansatz_misses = _shared(principal_angles(q_known, ansatz_q), tol) - common
    overlaps = []
    offset = 0
    for s in continuous:
        block = known[:, offset : offset + s.dim]
        pointwise = max(
            float(_outside(_orthonormal(found_i)[0], known_i[:, offset : offset + s.dim]).max())
            for found_i, known_i in zip(discovered_parts, catalogue_parts, strict=True)
        )
        offset += s.dim
        outside = float(_outside(ansatz_q, block).max()) if ansatz_q is not None else None
        overlaps.append(
            SymmetryOverlap(
                s.name, s.group, s.dim, float(_outside(q_found, block).max()), pointwise, outside
            )
        )
    return CatalogueComparison(
        dim_discovered=q_found.shape[1],
        dim_catalogue=q_known.shape[1],
        dim_common=common,
        catalogue_misses=q_found.shape[1] - common,
        discovery_misses=q_known.shape[1] - common,
        discovery_misses_in_ansatz=in_ansatz_misses,
        principal_angles=angles.tolist(),
        orbit_dim_discovered=orbit[0],
        orbit_dim_catalogue=orbit[1],
        orbit_catalogue_misses=orbit[2],
        orbit_discovery_misses=orbit[3],
        orbit_principal_angles=orbit[4],
        generator_residuals=_outside(q_known, found).tolist() if found.shape[1] else [],
        symmetries=overlaps,
        closure=lie_closure(result),
        points=len(result.points),
        tol=tol,
        skipped=skipped,
        missed_by_catalogue=_missed(result, ansatz, q_found, q_known, s_found, vh_found, tol),
    )


def _shared(angles: Tensor, tol: float) -> int:
    """Directions two spans share: principal angles with sine ≤ ``tol``."""
    return int((torch.sin(angles) <= tol).sum())


def _orbits(
    found: Sequence[Tensor], known: Sequence[Tensor], tol: float
) -> tuple[int, int, int, int, list[float]]:
    """Point-by-point comparison of tangent spaces: (largest discovered dimension, largest
    catalogued, most discovered directions outside the catalogue's at one point, most
    catalogued outside the discovered, the largest principal angles over the points)."""
    dims_found = dims_known = misses_catalogue = misses_discovery = 0
    worst: Tensor | None = None
    for found_i, known_i in zip(found, known, strict=True):
        q_f, q_k = _orthonormal(found_i)[0], _orthonormal(known_i)[0]
        angles = principal_angles(q_f, q_k)
        shared = _shared(angles, tol)
        dims_found = max(dims_found, q_f.shape[1])
        dims_known = max(dims_known, q_k.shape[1])
        misses_catalogue = max(misses_catalogue, q_f.shape[1] - shared)
        misses_discovery = max(misses_discovery, q_k.shape[1] - shared)
        if worst is None or worst.numel() != angles.numel():
            worst = angles if worst is None or angles.numel() > worst.numel() else worst
        else:
            worst = torch.maximum(worst, angles)
    angles_out = [] if worst is None else worst.tolist()
    return dims_found, dims_known, misses_catalogue, misses_discovery, angles_out


def principal_angles(q1: Tensor, q2: Tensor) -> Tensor:
    """Principal angles (ascending, radians) between the spans of orthonormal q1 (n, k1) and
    q2 (n, k2), min(k1, k2) of them: small angles from the sines, σ((I − q2q2ᵀ) q1), which
    keep their accuracy where 1 − cos does not (Björck and Golub 1973)."""
    k = min(q1.shape[1], q2.shape[1])
    if k == 0:
        return q1.new_zeros(0)
    cosines = torch.linalg.svdvals(q1.T @ q2)[:k].clamp(0, 1)
    small, large = (q1, q2) if q1.shape[1] <= q2.shape[1] else (q2, q1)
    sines = torch.linalg.svdvals(small - large @ (large.T @ small)).flip(0)[:k].clamp(0, 1)
    return torch.where(cosines > 0.5**0.5, torch.arcsin(sines), torch.arccos(cosines))


def _ansatz_span(ansatz: Ansatz, points: Sequence[dict[str, Tensor]]) -> Tensor | None:
    """Orthonormal basis of span{B_j θ_i stacked over the points}, when small enough."""
    p = ansatz.numel
    if len(points) * p * ansatz.size > ANSATZ_SPAN_LIMIT:
        return None
    eye = torch.eye(ansatz.size, dtype=torch.float64)
    images = torch.cat([ansatz.field(eye, ansatz.flatten(point).double()) for point in points])
    return _orthonormal(images)[0]


def _missed(
    result: DiscoveryResult,
    ansatz: Ansatz,
    q_found: Tensor,
    q_known: Tensor,
    s_found: Tensor,
    vh_found: Tensor,
    tol: float,
) -> list[DiscoveredGenerator]:
    """Discovered generators (orthonormal combinations) outside the catalogue's span."""
    if result.coefficients.is_sparse or q_found.shape[1] == 0:
        return []
    rank = q_found.shape[1]
    if q_known.shape[1]:
        rest = q_found - q_known @ (q_known.T @ q_found)
        u, sines, _ = svd(rest, full_matrices=False)
        directions = (q_found.T @ u)[:, sines > tol]
    else:
        directions = torch.eye(rank, dtype=q_found.dtype)
    # q_found = found V S⁻¹ (first `rank` columns), so a combination y of q_found's columns is
    # the generator with coefficients C V S⁻¹ y
    mixing = vh_found[:rank].T / s_found[:rank]
    coefficients = result.coefficients.to(mixing.dtype) @ (mixing @ directions)
    coefficients = coefficients / coefficients.norm(dim=0).clamp_min(1e-300)
    return [
        DiscoveredGenerator(ansatz, coefficients[:, j], j) for j in range(coefficients.shape[1])
    ]


def lie_closure(
    result: DiscoveryResult,
    *,
    tol: float = 1e-6,
    max_pairs: int = 500,
    generator: torch.Generator | None = None,
) -> ClosureReport | None:
    """Whether brackets of discovered generators stay in their span (module docstring).

    All pairs when there are at most ``max_pairs``, otherwise ``max_pairs`` random ones.
    ``None`` when the generators are neither in a bracket-closed ansatz nor small matrices.
    """
    ansatz = result.ansatz_object
    d = result.dim_estimate
    if ansatz is None:
        return None
    if d < 2:
        return ClosureReport(0, 0.0, 0.0, True, tol, "trivial")
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    if len(pairs) > max_pairs:
        picks = torch.randperm(len(pairs), generator=generator or torch.Generator().manual_seed(0))
        pairs = [pairs[int(k)] for k in picks[:max_pairs]]
    probe = ansatz.bracket(_columns(result, 0, 1)[:, 0], _columns(result, 1, 2)[:, 0])
    if probe is not None:
        return _closure_in_coefficients(result, ansatz, pairs, tol)
    if ansatz.numel > MATRIX_LIMIT:
        return None
    matrices = torch.stack(
        [ansatz.matrix(_columns(result, j, j + 1)[:, 0]).reshape(-1) for j in range(d)], dim=1
    )
    q = _orthonormal(matrices)[0]
    residuals = []
    for i, j in pairs:
        a, b = matrices[:, i].reshape(ansatz.numel, -1), matrices[:, j].reshape(ansatz.numel, -1)
        commutator = (a @ b - b @ a).reshape(-1, 1)
        scale = float(a.norm() * b.norm())
        residuals.append(float((commutator - q @ (q.T @ commutator)).norm()) / max(scale, 1e-300))
    return _report(residuals, tol, "matrices")


def _closure_in_coefficients(
    result: DiscoveryResult, ansatz: Ansatz, pairs: list[tuple[int, int]], tol: float
) -> ClosureReport:
    span = result.coefficients
    redundant = ansatz.redundancy().to(torch.float64)
    residuals = []
    for i, j in pairs:
        a, b = _columns(result, i, i + 1)[:, 0], _columns(result, j, j + 1)[:, 0]
        commutator = ansatz.bracket(a, b)
        assert commutator is not None
        rest = commutator - _project(span, commutator)
        if redundant.shape[0]:
            rest = rest - redundant.T @ (redundant @ rest)
            rest = rest - _project(span, rest)
        scale = float(a.norm() * b.norm())
        residuals.append(float(rest.norm()) / max(scale, 1e-300))
    return _report(residuals, tol, "coefficients")


def _project(span: Tensor, vector: Tensor) -> Tensor:
    """Projection onto the columns of ``span`` (orthonormal; dense or sparse)."""
    if span.is_sparse:
        weights = torch.sparse.mm(span.t(), vector[:, None])
        return torch.sparse.mm(span, weights)[:, 0]
    return span @ (span.T @ vector)


def _report(residuals: list[float], tol: float, method: str) -> ClosureReport:
    largest = max(residuals) if residuals else 0.0
    mean = sum(residuals) / len(residuals) if residuals else 0.0
    return ClosureReport(len(residuals), largest, mean, largest <= tol, tol, method)
