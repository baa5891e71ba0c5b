"""Is the catalogue complete? The functional-dimension audit (seed 004 as the yardstick).

At a point θ, the directions v that leave every output unchanged to first order are the null
space of the parameter Jacobian J = ∂ vec f(θ; X)/∂θ over enough inputs X: P − FD of them, FD =
rank J the functional dimension (seed 004; Grigsby et al. 2022). Every continuous symmetry of
the function moves θ inside that null space, so the catalogue's tangent matrices T_k
(:func:`~paramsym.curvature.tangent_matrix`) span part of it, and seed 004's bound
FD ≤ P − dim(local orbit) (Grigsby and Lindsey, Cor. 4.3) is an equality exactly when they span
all of it. :func:`audit` measures the difference (notes 006):

    flat = P − FD = named + missing

* **named**: the flat directions the catalogue accounts for, dim(null J ∩ span T);
* **missing**: the rest, with the parameter tensors that carry it. Two kinds of flat direction
  are not symmetries of the function, and the audit reports them within ``missing``:
  *unreached* ones, parameters no input of the audit reaches at this point (zero columns of J:
  a token that never occurs, a position beyond the sequence, a dead ReLU unit; also a parameter
  the function ignores altogether, which is a symmetry), and *point-degenerate* ones: at a
  second, perturbed point (``points=2``) the count is measured again, on inputs half of which
  spread :data:`WIDE_SPREAD` times wider than the example's, and the reached directions missing
  at θ only belong to this point and these data (a ReLU unit that is always active, or almost
  never, on inputs like the example: notes 004). What is missing at both points and reached is
  a symmetry the catalogue does not name: ``missing = unreached + point_degenerate`` where
  nothing is.

Ranks are decided at the widest gap of each spectrum (:func:`~paramsym.core.ranks.decide_rank`),
and the audit says when a gap is not clean. The Jacobian is computed in float64 (reverse mode
per sample, :func:`~paramsym.tangent_kernel.dimension.parameter_jacobian`, which also runs
BLOOM's custom ``autograd.Function`` blocks) with the model's internal down-casts kept in
float64 (:class:`~paramsym.core.precision.KeepFloat64`), and the inputs are drawn like the
example (:mod:`~paramsym.tangent_kernel.probes`) in two halves: the rank on the first half must
already equal the rank on both, else more data would make fewer directions flat and the audit
says so (``data_stable``). Only continuous symmetries have tangents; permutations and sign
flips are not counted (they are discrete).

>>> import torch, paramsym as ps
>>> model = ps.mlp([3, 4, 2], activation="tanh", dtype=torch.float64, seed=0)
>>> report = ps.audit(model, torch.randn(2, 3, dtype=torch.float64))
>>> report.flat, report.named, report.missing
(0, 0, 0)
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.batches import Inputs, apply, as_inputs, floats_to, take
from paramsym.core.linalg import svd
from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.params import params_of
from paramsym.core.precision import KeepFloat64
from paramsym.core.ranks import RankDecision, decide_rank
from paramsym.curvature import tangent_matrix
from paramsym.errors import InvalidArgumentError, ParamsymWarning
from paramsym.symmetry import Symmetry, symmetries
from paramsym.tangent_kernel.dimension import parameter_jacobian
from paramsym.tangent_kernel.outputs import flat_outputs
from paramsym.tangent_kernel.probes import draw_like, index_ranges, vocabulary

DENSE_PARAMETER_LIMIT = 20_000
"""The largest model the dense audit takes by default (J in float64 is about 2P × P)."""

POINT_NOISE = 0.1
"""The second point: θ plus this times each tensor's RMS times a standard normal."""

WIDE_SPREAD = 4.0
"""At the second point, half the inputs are drawn with the example's mean and this many times
its standard deviation (floating inputs): units that inputs like the example leave always
active or (almost) never active change state there."""


class AuditPrecisionWarning(ParamsymWarning):
    """The audit runs in a precision whose rounding floor hides narrow gaps."""


class AuditSizeError(InvalidArgumentError):
    """The model is too large for the dense audit."""


@dataclass(frozen=True)
class SymmetryShare:
    """One continuous symmetry of the catalogue in an audit: its Lie-algebra dimension, the
    dimension of its orbit through θ (the rank of its tangent matrix) and how far its tangents
    leave the flat space (‖J T‖_F / (σ₁ ‖T‖_F); about the flat singular values for an exact
    symmetry)."""

    name: str
    group: str
    dim: int
    orbit: int
    leaves_flat: float


@dataclass
class AuditReport:
    """What :func:`audit` measured (plain numbers; :meth:`to_dict` for JSON).

    Attributes:
        model: the model's class name.
        parameters: P.
        rows: rows of J (samples × outputs per sample), over both halves of the data.
        functional_dimension: FD = rank J, with its gap in ``ranks["jacobian"]``.
        flat: P − FD.
        named: flat directions the catalogue spans.
        missing: flat directions it does not span (``flat − named``).
        unreached: the part of ``missing`` made of parameters no input reached (zero columns
            of J).
        carriers: parameter → dimensions of the missing directions it carries (their squared
            entries summed over the tensor; the values sum to ``missing``), largest first.
        unreached_parameters: parameter → number of its entries with a zero Jacobian column.
        missing_elsewhere: ``missing`` at the second point (``None`` with ``points=1``).
        point_degenerate: reached directions missing at θ but not at the second point (on its
            wider inputs): ``(missing − unreached) − (missing_elsewhere −
            unreached_elsewhere)``, at least 0.
        data_stable: the rank on the first half of the data equals the rank on all of it.
        ranks: ``"jacobian"``, ``"catalogue"``, ``"missing"`` (and ``"jacobian_half"``):
            the gap decisions, as :class:`~paramsym.core.ranks.RankDecision` dicts.
        catalogue: one :class:`SymmetryShare` per continuous exact symmetry of the function.
        not_flat: names of catalogue symmetries whose tangents leave the flat space (a
            symmetry that is not one: a bug of its family).
        left_out: catalogue entries not counted (discrete, approximate, loss or data-dependent),
            with the reason.
        approximate: approximate symmetries (exact up to a norm's ``eps``: the rescalings of a
            LayerNorm's input) whose tangents stay in the flat space at this point, within the
            rank's gap: the function changes along them by less than the audit resolves, so
            they are counted in ``named`` (and not in ``left_out``).
        determined: every rank was decided at a clean gap and the data were enough.
        notes: how the audit was run.
    """

    model: str
    parameters: int
    rows: int
    functional_dimension: int
    flat: int
    named: int
    unreached: int
    missing: int
    carriers: dict[str, float]
    unreached_parameters: dict[str, int]
    missing_elsewhere: int | None
    point_degenerate: int | None
    data_stable: bool
    ranks: dict[str, dict[str, Any]]
    catalogue: list[SymmetryShare] = field(repr=False)
    not_flat: list[str]
    left_out: dict[str, str] = field(repr=False)
    determined: bool = True
    notes: list[str] = field(default_factory=list)
    approximate: list[str] = field(default_factory=list)
    unreached_elsewhere: int | None = None

    @property
    def complete(self) -> bool:
        """The catalogue names every flat direction, at clean gaps, and all it names is flat."""
        return self.missing == 0 and self.determined and not self.not_flat

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        jac = RankDecision(**self.ranks["jacobian"])
        lines = [
            f"audit of {self.model}: P = {self.parameters:,}, J {self.rows:,} × "
            f"{self.parameters:,} (float64)",
            f"  functional dimension {jac.describe()}",
            f"  flat {self.flat:,} = named {self.named:,} + missing {self.missing:,}",
        ]
        if self.carriers:
            top = ", ".join(f"{k} {v:.1f}" for k, v in list(self.carriers.items())[:6])
            lines.append(f"  missing carried by {top}")
        if self.unreached:
            where = ", ".join(f"{k} {v}" for k, v in list(self.unreached_parameters.items())[:6])
            lines.append(f"  of which {self.unreached} unreached by the inputs ({where})")
        if self.point_degenerate:
            lines.append(
                f"  of which {self.point_degenerate} reached but missing at this point and on "
                "these inputs only"
            )
        if self.not_flat:
            lines.append(f"  NOT flat (not symmetries): {', '.join(self.not_flat)}")
        if not self.data_stable:
            lines.append("  more data would make fewer directions flat: raise `rows`")
        if not self.determined:
            lines.append("  some rank is not determined (no clean gap): see .ranks")
        return "\n".join(lines)


def every_output(raw: Any) -> Tensor:
    """Every floating tensor of a forward's return value (a tensor, tuple, list, mapping or
    ``ModelOutput``, nested), each flattened after its batch axis and concatenated: ``(b, O)``.
    A symmetry of the function keeps all of them."""
    parts: list[Tensor] = []

    def collect(value: Any) -> None:
        if isinstance(value, Tensor):
            if value.is_floating_point() and value.ndim:
                parts.append(value.reshape(value.shape[0], -1))
        elif isinstance(value, Mapping):
            for item in value.values():
                collect(item)
        elif isinstance(value, (tuple, list)):
            for item in value:
                collect(item)

    collect(raw)
    if not parts:
        raise InvalidArgumentError(
            f"audit: the forward returned {type(raw).__name__} with no floating tensor to audit"
        )
    return torch.cat(parts, dim=1)


def audit(
    model: nn.Module,
    example_input: Any,
    *,
    catalogue: list[Symmetry] | None = None,
    rows: int | None = None,
    points: int = 2,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    max_parameters: int = DENSE_PARAMETER_LIMIT,
) -> AuditReport:
    """Audit ``ps.symmetries(model, example_input)`` against the flat directions of the model's
    function (module docstring; notes 006).

    Args:
        model: any ``nn.Module`` in evaluation mode, called as :func:`paramsym.symmetries`
            calls it (a tensor, a tuple or a dict of keyword inputs).
        example_input: a batch; the audit draws its inputs like it
            (:func:`~paramsym.tangent_kernel.probes.draw_like`): token ids over the
            vocabulary, other integer inputs an embedding reads (``token_type_ids``) over its
            table's rows. An input the example leaves out is not drawn: the rows the model's
            default never uses (BERT's token types other than 0) are then reported as
            ``unreached``.
        catalogue: the symmetries to audit (default: ``ps.symmetries(model, example_input)``).
        rows: rows of J per half of the data (default P, so that either half can reach full
            rank): samples are drawn until each half has at least this many output entries,
            and, for token inputs, until each half draws about 3·V·ln V tokens of a vocabulary
            of V (so that every token occurs in each half, but with probability 1/V²).
        points: 2 (default) audits a second, perturbed point to separate point-degenerate
            directions from missing symmetries; 1 audits θ only.
        dtype: float64 (default) or float32 (warns: ranks are decided at a looser gap).
        seed: for the drawn inputs and the second point.
        max_parameters: the largest P the dense audit takes (default
            :data:`DENSE_PARAMETER_LIMIT`).

    Returns:
        An :class:`AuditReport`; ``report.complete`` says whether the catalogue names every
        flat direction. The model is not changed.
    """
    require_module(model, "audit")
    check_deterministic(model, "audit")
    training = [n or "(the model)" for n, m in model.named_modules()
                if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training]  # fmt: skip
    if training:
        raise InvalidArgumentError(
            f"audit: BatchNorm '{training[0]}' is in training mode, so a sample's output depends "
            "on the rest of its batch; call model.eval() first"
        )
    if points not in (1, 2):
        raise InvalidArgumentError(f"audit: points must be 1 or 2, got {points}")
    if dtype not in (torch.float32, torch.float64):
        raise InvalidArgumentError(f"audit: dtype must be float32 or float64, got {dtype}")
    size = sum(p.numel() for p in model.parameters())
    if size > max_parameters:
        raise AuditSizeError(
            f"audit: {type(model).__name__} has {size:,} parameters; the dense audit needs a "
            f"Jacobian of about 2P × P = {2 * size * size * 8 / 2**30:.1f} GiB in float64 and "
            f"its SVD, and takes at most max_parameters={max_parameters:,}. Use the block-local "
            "audit, ps.local_audit(model, example_input) (each block, or each large linear "
            "layer, on its recorded inputs), audit the same architecture at a smaller width or "
            "depth (the catalogue is read off the architecture), or raise max_parameters"
        )
    if dtype == torch.float32:
        warnings.warn(
            "audit(dtype=float32): float32 rounding (1e-7) leaves narrower gaps between flat "
            "and genuine singular values than float64, so ranks are decided at a looser gap "
            "and may be not determined; audit in float64 where you can",
            AuditPrecisionWarning,
            stacklevel=2,
        )
    padded = [
        m for m in model.modules() if isinstance(m, nn.Embedding) and m.padding_idx is not None
    ]
    work = model if _dtype_of(model) == dtype and not padded else copy.deepcopy(model).to(dtype)
    for module in work.modules():
        if isinstance(module, nn.Embedding):
            module.padding_idx = None  # its forward is the same; its row a parameter like any
    example = floats_to(_as_batch(example_input), dtype)
    if catalogue is None:
        catalogue = symmetries(work, example_input=example)
    notes = list(getattr(catalogue, "notes", ()))
    if padded:
        notes.append(
            "embedding padding rows differentiated as the parameters they are (torch's gradient "
            "leaves them out; their values are used by the forward all the same)"
        )
    counted, left_out = _counted(catalogue)
    approximate = [s for s in catalogue if left_out.get(s.name) == "approximate"]
    generator = torch.Generator().manual_seed(seed)
    point = params_of(work)
    with torch.no_grad():
        per_sample = flat_outputs(work, point, _first(example), every_output, "audit").shape[1]
    per_half = max(rows if rows is not None else size, 1)
    samples = math.ceil(per_half / per_sample)
    vocab = vocabulary(work)
    tokens = _tokens_per_sample(example)
    if vocab and tokens:  # every token in each half with probability 1 − 1/vocab²
        samples = max(samples, math.ceil(3 * vocab * math.log(max(vocab, 2)) / tokens))
    ranges = index_ranges(work, example)  # other integer inputs: over their tables' rows
    data = floats_to(
        draw_like(example, 2 * samples, generator, vocabulary=vocab, ranges=ranges), dtype
    )
    eps = torch.finfo(dtype).eps
    shapes = {k: t.numel() for k, t in point.items()}

    first = _measure(work, point, data, counted, approximate, shapes, eps, samples * per_sample)
    notes += first.notes
    report = AuditReport(
        model=type(model).__name__,
        parameters=size,
        rows=first.rows,
        functional_dimension=first.jacobian.rank,
        flat=size - first.jacobian.rank,
        named=first.named,
        unreached=first.unreached,
        missing=first.missing_rank.rank,
        carriers=first.carriers,
        unreached_parameters=first.unreached_parameters,
        missing_elsewhere=None,
        point_degenerate=None,
        data_stable=first.half.rank == first.jacobian.rank,
        ranks={
            "jacobian": first.jacobian.to_dict(),
            "jacobian_half": first.half.to_dict(),
            "catalogue": first.catalogue.to_dict(),
            "missing": first.missing_rank.to_dict(),
        },
        catalogue=first.shares,
        not_flat=[s.name for s in first.shares if s.leaves_flat > first.flat_level],
        left_out={k: v for k, v in left_out.items() if k not in first.approximate},
        notes=notes,
        approximate=first.approximate,
    )
    if first.approximate:
        report.notes.append(
            f"{len(first.approximate)} approximate symmetries (exact up to a norm's eps) stay "
            "in the flat space at this point and are counted as named: "
            + ", ".join(first.approximate)
        )
    decisions = [first.jacobian, first.catalogue, first.missing_rank]
    if points == 2:
        moved = _perturbed(point, generator)
        wide = draw_like(_spread(example, WIDE_SPREAD), samples, torch.Generator().manual_seed(
            seed + 1), vocabulary=vocab, ranges=ranges)  # fmt: skip
        mixed = _joined(take(data, slice(0, samples)), floats_to(wide, dtype))
        second = _measure(work, moved, mixed, counted, approximate, shapes, eps, None)
        report.missing_elsewhere = second.missing_rank.rank
        report.unreached_elsewhere = second.unreached
        report.point_degenerate = max(
            report.missing - report.unreached - (second.missing_rank.rank - second.unreached), 0
        )
        report.ranks["jacobian_elsewhere"] = second.jacobian.to_dict()
        decisions += [second.jacobian, second.missing_rank]
    report.determined = all(d.determined for d in decisions) and report.data_stable
    if vocab is None and _has_tokens(example):
        report.notes.append(
            "token ids drawn below the example's largest id + 1: no embedding table says the "
            "vocabulary"
        )
    return report


@dataclass
class _Measurement:
    rows: int
    jacobian: RankDecision
    half: RankDecision
    catalogue: RankDecision
    missing_rank: RankDecision
    named: int
    unreached: int
    carriers: dict[str, float]
    unreached_parameters: dict[str, int]
    shares: list[SymmetryShare]
    flat_level: float
    notes: list[str]
    approximate: list[str]


def _measure(
    model: nn.Module,
    point: dict[str, Tensor],
    data: Inputs,
    counted: list[Symmetry],
    approximate: list[Symmetry],
    shapes: dict[str, int],
    eps: float,
    half_rows: int | None,
) -> _Measurement:
    """Everything the audit measures at one point ``point`` on ``data``; the rank on the first
    ``half_rows`` rows too, where given. Of the ``approximate`` symmetries, those whose tangents
    stay within the flat level are counted with the exact ones."""
    size = sum(shapes.values())
    float64 = next(iter(point.values())).dtype == torch.float64
    with KeepFloat64() if float64 else contextlib.nullcontext() as kept:
        jacobian = parameter_jacobian(model, data, point, output=every_output, batch_size=64)
    notes = []
    if kept is not None and kept.count:
        notes.append(
            "the model's casts to float32 inside its forward were kept in float64 (the function "
            "of exact arithmetic; Hugging Face's RMSNorm computes in float32)"
        )
    rows = jacobian.shape[0]
    triangle, half_triangle = _triangular(jacobian, half_rows)
    _, singular, vh = svd(triangle, full_matrices=triangle.shape[0] < size)
    decision = decide_rank(singular, eps=eps, size=max(rows, size))
    half = (
        decide_rank(torch.linalg.svdvals(half_triangle), eps=eps, size=max(half_rows or 0, size))
        if half_triangle is not None
        else decision
    )
    top = float(singular[0]) if singular.numel() else 0.0
    # between the last kept and the first dropped singular value, relative to σ₁
    flat_level = math.sqrt(max(decision.last_kept, 1e-300) * max(decision.first_dropped, eps))
    null = vh[decision.rank :]  # (flat, P), orthonormal rows
    zero_columns = jacobian.norm(dim=0) <= max(rows, size) * eps * top
    tangents, shares = _tangents(counted, point, jacobian, top)
    close, close_shares = _tangents(approximate, point, jacobian, top)
    flat_rows = [s.leaves_flat <= flat_level for s in close_shares for _ in range(s.dim)]
    if any(flat_rows):
        tangents = torch.cat([tangents, close[torch.tensor(flat_rows)]])
        shares += [s for s in close_shares if s.leaves_flat <= flat_level]
    named_basis, catalogue_rank = _row_basis(tangents, eps, size)
    where = zero_columns.nonzero().flatten()
    unit = jacobian.new_zeros(where.numel(), size)
    unit[torch.arange(where.numel()), where] = 1.0
    known_basis, _ = _row_basis(torch.cat([named_basis, unit]), eps, size, reference=1.0)
    missing_rank, directions = _outside(null, named_basis, eps)
    named = null.shape[0] - missing_rank.rank
    unreached = missing_rank.rank - _outside(null, known_basis, eps)[0].rank
    return _Measurement(
        rows=rows,
        jacobian=decision,
        half=half,
        catalogue=catalogue_rank,
        missing_rank=missing_rank,
        named=named,
        unreached=unreached,
        carriers=_carriers(directions, shapes),
        unreached_parameters=_per_tensor_counts(zero_columns, shapes),
        shares=shares,
        flat_level=flat_level,
        notes=notes,
        approximate=[s.name for s in close_shares if s.leaves_flat <= flat_level],
    )


def _triangular(jacobian: Tensor, half_rows: int | None) -> tuple[Tensor, Tensor | None]:
    """R factors of J and of its first ``half_rows`` rows (``None`` without): J = QR has J's
    singular values and right singular vectors, and R is P × P where J is (2P) × P, so its SVD
    costs a third of J's (Householder QR is backward stable: nothing is lost that the SVD of J
    would keep). The whole R is the QR of [R_half; the other rows]."""
    if half_rows is None:
        return torch.linalg.qr(jacobian, mode="r")[1], None
    half = torch.linalg.qr(jacobian[:half_rows], mode="r")[1]
    whole = torch.linalg.qr(torch.cat([half, jacobian[half_rows:]]), mode="r")[1]
    return whole, half


def _tangents(
    counted: list[Symmetry], point: dict[str, Tensor], jacobian: Tensor, top: float
) -> tuple[Tensor, list[SymmetryShare]]:
    """The stacked tangent matrices of the counted symmetries at ``point``, shape (Σ dim, P),
    and each one's share (orbit dimension, how far it leaves the flat space)."""
    size = jacobian.shape[1]
    blocks, shares = [], []
    for s in counted:
        block = tangent_matrix(s, point, dtype=jacobian.dtype)
        singular = torch.linalg.svdvals(block)
        orbit = decide_rank(singular, eps=torch.finfo(block.dtype).eps, size=size).rank
        norm = float(block.norm())
        leaves = float((jacobian @ block.T).norm()) / (top * norm) if norm and top else 0.0
        shares.append(SymmetryShare(s.name, s.group, s.dim, orbit, leaves))
        blocks.append(block)
    empty = jacobian.new_zeros(0, size)
    return (torch.cat(blocks) if blocks else empty), shares


def _row_basis(
    matrix: Tensor, eps: float, size: int, reference: float | None = None
) -> tuple[Tensor, RankDecision]:
    """An orthonormal basis (rows) of the row space of ``matrix``, rank decided at its gap."""
    if matrix.shape[0] == 0:
        return matrix, RankDecision(0, 0, 0.0, 0.0, math.inf, 0.0, True)
    _, singular, vh = svd(matrix)
    decision = decide_rank(singular, eps=eps, size=size, reference=reference)
    return vh[: decision.rank], decision


def _outside(null: Tensor, basis: Tensor, eps: float) -> tuple[RankDecision, Tensor]:
    """The part of the row space of ``null`` (orthonormal rows) outside the row space of
    ``basis`` (orthonormal rows): its dimension (the sines of the principal angles, decided
    against 1) and an orthonormal basis of it (rows)."""
    if null.shape[0] == 0:
        return RankDecision(0, 0, 0.0, 0.0, math.inf, 0.0, True), null
    residual = null - (null @ basis.T) @ basis if basis.shape[0] else null
    _, sines, vh = svd(residual)
    decision = decide_rank(sines, eps=eps, size=null.shape[1], reference=1.0)
    return decision, vh[: decision.rank]


def _carriers(directions: Tensor, shapes: dict[str, int]) -> dict[str, float]:
    """Parameter → Σ of the squared entries of the orthonormal missing ``directions`` in its
    slice (the dimensions it carries; the values sum to ``missing``), for parameters carrying
    at least 0.01, largest first. The directions are the flat ones orthogonal to the
    catalogue's span, so a missing direction that overlaps named ones shows a little on their
    tensors too."""
    found: dict[str, float] = {}
    offset = 0
    for name, count in shapes.items():
        share = float(directions[:, offset : offset + count].square().sum())
        offset += count
        if share >= 0.01:
            found[name] = round(share, 2)
    return dict(sorted(found.items(), key=lambda item: -item[1]))


def _per_tensor_counts(mask: Tensor, shapes: dict[str, int]) -> dict[str, int]:
    found: dict[str, int] = {}
    offset = 0
    for name, count in shapes.items():
        hits = int(mask[offset : offset + count].sum())
        offset += count
        if hits:
            found[name] = hits
    return found


def _counted(catalogue: list[Symmetry]) -> tuple[list[Symmetry], dict[str, str]]:
    """The continuous, exact, data-free symmetries of the function, and why the others are not
    counted."""
    counted, left_out = [], {}
    for s in catalogue:
        reason = (
            "discrete"
            if s.dim == 0
            else "approximate"
            if not s.exact
            else "a symmetry of the loss, not the function"
            if s.preserves != "function"
            else "data-dependent"
            if s.data_dependent
            else None
        )
        if reason is None:
            counted.append(s)
        else:
            left_out[s.name] = reason
    return counted, left_out


def _perturbed(point: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
    """θ plus :data:`POINT_NOISE` times each tensor's RMS (1 where it is 0) times N(0, 1)."""
    moved = {}
    for name, t in point.items():
        rms = float(t.double().square().mean().sqrt()) if t.numel() else 0.0
        noise = torch.randn(t.shape, generator=generator, dtype=torch.float64).to(t.dtype)
        moved[name] = t + POINT_NOISE * (rms or 1.0) * noise
    return moved


def _dtype_of(model: nn.Module) -> torch.dtype | None:
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    return None if first is None else first.dtype


def _as_batch(example_input: Any) -> Inputs:
    if isinstance(example_input, tuple):
        raise InvalidArgumentError(
            "audit: example_input must be a tensor or a mapping of keyword inputs (the audit "
            "draws samples like it); pass positional inputs as a tensor"
        )
    return as_inputs(example_input, "audit", "example_input")  # checks the batch axis too


def _first(x: Inputs) -> Inputs:
    return {k: v[:1] for k, v in x.items()} if isinstance(x, dict) else x[:1]


def _tokens_per_sample(x: Inputs) -> int:
    """Token ids per sample of the input the audit draws uniformly over the vocabulary (an
    integer ``input_ids``, or an integer tensor given alone; 0 when there is none)."""
    if isinstance(x, dict):
        ids = x.get("input_ids")
        return int(ids[0].numel()) if isinstance(ids, Tensor) and not ids.is_floating_point() else 0
    return int(x[0].numel()) if not x.is_floating_point() else 0


def _has_tokens(x: Inputs) -> bool:
    values = x.values() if isinstance(x, dict) else [x]
    return any(not v.is_floating_point() for v in values)


def _spread(x: Inputs, factor: float) -> Inputs:
    """``x`` with every floating tensor's deviations from its mean times ``factor`` (what
    :func:`~paramsym.tangent_kernel.probes.draw_like` reads: the same mean, ``factor`` times
    the standard deviation)."""

    return apply(x, lambda t: t.mean() + factor * (t - t.mean()) if t.is_floating_point() else t)


def _joined(a: Inputs, b: Inputs) -> Inputs:
    """Two batches of the same kind, one after the other."""
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return {k: torch.cat([a[k], b[k]]) for k in a}
    assert isinstance(b, Tensor)
    return torch.cat([a, b])
