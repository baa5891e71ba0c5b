"""The block-local audit: each part of a model audited on its recorded inputs, for models too
large for the dense audit (notes 006; issue 44).

:func:`~paramsym.tangent_kernel.completeness.audit` needs the whole Jacobian J (about 2P × P);
at GPT-2-small's 124 M parameters that is out of reach. :func:`local_audit` cuts the model
into *units* and audits each one alone, as the function of its own parameters on the inputs
it receives in one recorded forward pass (the rest of the model fixed):

* **dense** units: the coarsest submodules (a transformer block, a ResNet block) with at most
  ``max_parameters`` parameters. Their J over the recorded calls, the R factor of its QR and
  its SVD, ranks at the widest gap, as in the dense audit;
* **linear** units: a ``Linear`` (or Hugging Face ``Conv1D``) too large to be dense. Its output
  W a + b on the recorded inputs a is unchanged exactly by the changes (ΔW, Δb) whose every row
  is orthogonal to every recorded [a, 1], so its flat space is R^{out} ⊗ null(Ã), Ã the
  recorded inputs with a column of ones: out × (in + 1 − rank Ã) directions, from the R factor
  of Ã (accumulated over the forward, in + 1 square) instead of a Jacobian. A LayerNorm's
  reader has the one null vector (γ⁻¹, −Σβ/γ) (notes 006 §3a), which the catalogue names
  ``norm_reader``; any other null vector is a degenerate input (a feature that never varies);
* **embedding** units: a table's rows that no drawn token looks up are flat (data, not a
  symmetry);
* everything else too large and not linear is left out and named (``skipped``).

In each unit the catalogue's symmetries that move only that unit's parameters are counted
(their tangents, at the recorded point, against the unit's flat space; an action may read
other parameters, as ``norm_reader`` reads its norm's γ and β). **What a local audit cannot
see**: a symmetry that moves parameters of several units (the residual stream's maps, an
embedding sum across tables, a norm's β absorbed into readers in another unit, a GL between
two linear units) is not a flat direction of any one unit; those are listed in
``not_visible`` with the units they span, and a flat direction that needs several units
together is not found. A unit's flat directions that the catalogue does not name are
``missing``; on a linear unit they are degenerate inputs unless the unit reads a norm.

>>> import torch, paramsym as ps
>>> model = torch.nn.Sequential(torch.nn.LayerNorm(6), torch.nn.Linear(6, 4)).double()
>>> report = ps.local_audit(model, torch.randn(2, 6, dtype=torch.float64), max_parameters=20)
>>> [(u.name, u.method, u.flat, u.named) for u in report.units]
[('0', 'dense', 0, 0), ('1', 'linear', 4, 4)]
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.batches import Inputs, floats_to
from paramsym.core.calls import caches_off, call_arguments
from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.precision import KeepFloat64
from paramsym.core.ranks import decide_rank
from paramsym.errors import InvalidArgumentError
from paramsym.symmetry import Symmetry, symmetries
from paramsym.symmetry.absorption import NormReaderTranslation
from paramsym.tangent_kernel.completeness import (
    _as_batch,
    _counted,
    _outside,
    _row_basis,
    every_output,
)
from paramsym.tangent_kernel.local_entries import Entry, entries_by_unit, stack
from paramsym.tangent_kernel.probes import draw_like, vocabulary

UNIT_PARAMETER_LIMIT = 6_000
"""The largest unit audited densely by default (its J is about 2P × P in float64)."""

INSIDE_TOLERANCE = 1e-8
"""A linear unit counts a symmetry when each of its tangents lies in the unit's flat space to
this relative distance (the null vectors come from an SVD, accurate to about eps·σ₁/gap)."""

LINEAR_CHUNK = 32
"""Tangents computed at once (``vmap``) for a linear unit: each is as large as its weight."""

DENSE_UNIT_ENTRIES = 100_000_000
"""The largest Jacobian of one recorded call of a dense unit (outputs × parameters)."""

MAX_TOKENS = 16_384
"""The most input rows a linear unit is given (beyond: the rank may be not determined)."""


@dataclass
class UnitAudit:
    """One unit of a :func:`local_audit`.

    Attributes:
        name: the module's name in the model (``"h.0"``, ``"h.0.mlp.c_fc"``).
        method: ``"dense"``, ``"linear"``, ``"embedding"`` or ``"skipped"``.
        parameters: the unit's parameters.
        rows: rows of its Jacobian (dense), recorded inputs (linear), looked-up tokens
            (embedding).
        flat: its flat directions on the recorded inputs.
        named: those its catalogue entries span.
        missing: ``flat − named``.
        symmetries: the catalogue entries that move only this unit's parameters.
        determined: every rank at a clean gap, and the first half of the recorded inputs gave
            the same rank as all of them.
        ranks: the gap decisions (``"flat"``, ``"half"``, ``"catalogue"``, ``"missing"``).
        note: why a unit was skipped, or what its missing directions are.
        not_flat: entries that move only this unit but change its output (flat only through
            what reads it: a key bias, through the softmax); listed in ``not_visible``.
    """

    name: str
    method: str
    parameters: int
    rows: int = 0
    flat: int = 0
    named: int = 0
    missing: int = 0
    symmetries: list[str] = field(default_factory=list)
    determined: bool = True
    ranks: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    note: str = ""
    not_flat: list[str] = field(default_factory=list)


@dataclass
class LocalAuditReport:
    """What :func:`local_audit` measured.

    Attributes:
        model: the model's class name.
        parameters: P.
        units: one :class:`UnitAudit` per unit, in module order.
        not_visible: catalogue entries no unit sees, with why: they move parameters of several
            units (or of a skipped one), or they change the output of the one unit they move
            and are flat only through what reads it.
        tokens: input rows of the recording forward (samples × sequence for token models).
        notes: how the audit was run.
    """

    model: str
    parameters: int
    units: list[UnitAudit]
    not_visible: dict[str, str]
    tokens: int
    notes: list[str] = field(default_factory=list)

    @property
    def flat(self) -> int:
        return sum(u.flat for u in self.units)

    @property
    def named(self) -> int:
        return sum(u.named for u in self.units)

    @property
    def missing(self) -> int:
        return sum(u.missing for u in self.units)

    @property
    def audited_parameters(self) -> int:
        return sum(u.parameters for u in self.units if u.method != "skipped")

    @property
    def complete(self) -> bool:
        """Every audited unit's flat directions are named, at clean gaps (nothing skipped)."""
        return all(u.missing == 0 and u.determined and u.method != "skipped" for u in self.units)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flat": self.flat, "named": self.named, "missing": self.missing}

    def __str__(self) -> str:
        counts = {m: sum(u.method == m for u in self.units) for m in
                  ("dense", "linear", "embedding", "skipped")}  # fmt: skip
        lines = [
            f"local audit of {self.model}: P = {self.parameters:,} "
            f"({self.audited_parameters:,} audited) in "
            + ", ".join(f"{n} {m}" for m, n in counts.items() if n)
            + f" units, {self.tokens:,} recorded input rows (float64)",
            f"  flat {self.flat:,} = named {self.named:,} + missing {self.missing:,} "
            "(within units)",
        ]
        for u in self.units:
            if u.missing or not u.determined or u.method == "skipped":
                why = u.note or ("rank not determined" if not u.determined else "")
                lines.append(f"  {u.name} ({u.method}): missing {u.missing}. {why}".rstrip())
        if self.not_visible:
            lines.append(
                f"  not visible locally: {len(self.not_visible)} catalogue entries span several "
                "units or are flat only through what reads their unit (.not_visible)"
            )
        return "\n".join(lines)


def _is_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _size(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def units_of(model: nn.Module, max_parameters: int) -> list[tuple[str, nn.Module, str]]:
    """(name, module, method) of each unit: the coarsest submodules with at most
    ``max_parameters`` parameters (``"dense"``), larger linear maps (``"linear"``) and
    embeddings (``"embedding"``); a larger module with parameters of its own (not of a
    submodule) is ``"skipped"``, as is a larger leaf of another kind."""
    found: list[tuple[str, nn.Module, str]] = []
    seen: set[int] = set()

    def visit(name: str, module: nn.Module) -> None:
        if id(module) in seen or _size(module) == 0:
            return
        seen.add(id(module))
        if _size(module) <= max_parameters:
            found.append((name, module, "dense"))
        elif _is_linear(module):
            found.append((name, module, "linear"))
        elif isinstance(module, nn.Embedding):
            found.append((name, module, "embedding"))
        else:
            if any(True for _ in module.parameters(recurse=False)):
                found.append((name, module, "skipped"))
            for child, sub in module.named_children():
                visit(f"{name}.{child}" if name else child, sub)

    visit("", model)
    return found


class _Recorder:
    """Forward hooks that keep what each unit needs: the calls of dense units (inputs,
    detached), the R factors of [a, 1] of linear units (all and first half), the rows an
    embedding looks up."""

    def __init__(self, units: list[tuple[str, nn.Module, str]]) -> None:
        self.calls: dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {}
        self.factors: dict[str, Tensor] = {}
        self.half_factors: dict[str, Tensor] = {}
        self.buffers: dict[str, list[Tensor]] = {}
        self.widths: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.used: dict[str, Tensor] = {}
        self.paused = False
        self.handles = []
        for name, module, method in units:
            if method == "skipped":
                continue
            hook = getattr(self, f"_{method}")
            self.handles.append(
                module.register_forward_pre_hook(
                    lambda m, a, k, name=name, hook=hook: (
                        None if self.paused else hook(name, m, a, k)
                    ),
                    with_kwargs=True,
                )
            )

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()

    def reset(self) -> None:
        """Forget what was recorded (the hooks stay)."""
        for record in (self.calls, self.factors, self.half_factors, self.buffers, self.rows,
                       self.used):  # fmt: skip
            record.clear()

    def _dense(self, name: str, module: nn.Module, args: Any, kwargs: Any) -> None:
        self.calls.setdefault(name, []).append((_detached(args), _detached(kwargs)))

    def _linear(self, name: str, module: nn.Module, args: Any, kwargs: Any) -> None:
        a = args[0] if args else next(iter(kwargs.values()))
        a = a.detach().reshape(-1, a.shape[-1])
        if getattr(module, "bias", None) is not None:
            a = torch.cat([a, a.new_ones(a.shape[0], 1)], dim=1)
        self.rows[name] = self.rows.get(name, 0) + a.shape[0]
        self.widths[name] = a.shape[1]
        self.buffers.setdefault(name, []).append(a)
        if sum(b.shape[0] for b in self.buffers[name]) >= a.shape[1]:
            self._fold(name)

    def _fold(self, name: str) -> None:
        """R ← the R factor of [R; buffered rows] (a tall-skinny QR: each row enters once, and
        QR keeps the precision a Gram matrix would square away)."""
        pending = self.buffers.pop(name, [])
        if pending:
            previous = self.factors.get(name)
            stacked = torch.cat(pending if previous is None else [previous, *pending])
            self.factors[name] = torch.linalg.qr(stacked, mode="r")[1]

    def fold_all(self) -> None:
        for name in list(self.buffers):
            self._fold(name)

    def end_half(self) -> None:
        """Fold what is buffered and keep each linear unit's R factor of the first half."""
        self.fold_all()
        self.half_factors = dict(self.factors)

    def _embedding(self, name: str, module: nn.Module, args: Any, kwargs: Any) -> None:
        assert isinstance(module, nn.Embedding)
        ids = args[0] if args else next(iter(kwargs.values()))
        counts = torch.bincount(ids.reshape(-1), minlength=module.num_embeddings)
        self.used[name] = self.used.get(name, torch.zeros_like(counts)) + counts
        self.rows[name] = self.rows.get(name, 0) + ids.numel()


def _detached(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, tuple):
        return tuple(_detached(v) for v in value)
    if isinstance(value, list):
        return [_detached(v) for v in value]
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def local_audit(
    model: nn.Module,
    example_input: Any,
    *,
    catalogue: list[Symmetry] | None = None,
    samples: int | None = None,
    max_parameters: int = UNIT_PARAMETER_LIMIT,
    chunk: int = 8,
    seed: int = 0,
) -> LocalAuditReport:
    """Audit ``ps.symmetries(model, example_input)`` unit by unit on recorded inputs (module
    docstring), in float64 (a float64 copy of the model; its casts to float32 kept in float64).

    Args:
        model: any ``nn.Module`` in evaluation mode, called as :func:`paramsym.symmetries`
            calls it.
        example_input: a batch; the recording forward draws ``samples`` inputs like it.
        catalogue: the symmetries to audit (default: ``ps.symmetries(model, example_input)``).
        samples: inputs drawn for the recording forward (default: enough for each linear unit
            to see twice its input width + 1 rows, and each dense unit twice its parameters in
            output entries, up to :data:`MAX_TOKENS` rows).
        max_parameters: the largest unit audited densely (default
            :data:`UNIT_PARAMETER_LIMIT`).
        chunk: samples per recording forward pass.
        seed: for the drawn inputs.

    Returns:
        A :class:`LocalAuditReport`. The model is not changed.
    """
    require_module(model, "local_audit")
    check_deterministic(model, "local_audit")
    if max_parameters < 1 or chunk < 1:
        raise InvalidArgumentError("local_audit: max_parameters and chunk must be positive")
    work = copy.deepcopy(model).to(torch.float64)
    for module in work.modules():
        if isinstance(module, nn.Embedding):
            module.padding_idx = None
    example = floats_to(_as_batch(example_input), torch.float64)
    if catalogue is None:
        catalogue = symmetries(work, example_input=example)
    counted, _ = _counted(catalogue)
    units = units_of(work, max_parameters)
    names = {id(p): n for n, p in work.named_parameters()}
    owner: dict[str, str] = {}
    for unit, module, _ in units:
        for p in module.parameters():
            owner.setdefault(names[id(p)], unit)
    generator = torch.Generator().manual_seed(seed)
    vocab = vocabulary(work)
    recorder = _Recorder(units)
    try:
        first = draw_like(example, chunk, generator, vocabulary=vocab)
        _forward(work, first)
        per_sample = {k: v / chunk for k, v in recorder.rows.items()}
        recorder.paused = True  # the unit calls that measure output sizes are not recorded
        wanted = _wanted_samples(units, recorder, per_sample, chunk)
        recorder.paused = False
        total = samples if samples is not None else wanted
        recorder.reset()
        done = 0
        while done < total:
            batch = min(chunk, total - done)
            _forward(work, draw_like(example, batch, generator, vocabulary=vocab))
            done += batch
            if done >= total / 2 and not recorder.half_factors:
                recorder.end_half()
        recorder.fold_all()
    finally:
        recorder.close()
    point = {n: p.detach() for n, p in work.named_parameters()}
    skipped = {u for u, _, m in units if m == "skipped"}
    entries, not_visible = entries_by_unit(counted, point, owner, skipped)
    audits = []
    for name, module, method in units:
        size = _size(module)
        mine = entries.get(name, [])
        if method == "skipped":
            audits.append(UnitAudit(name, method, size, note=_skip_note(module, max_parameters)))
        elif method == "embedding":
            audits.append(_embedding_unit(name, module, recorder))
        elif method == "linear":
            audits.append(_linear_unit(name, module, recorder, mine, point, names))
        else:
            calls = recorder.calls.get(name, [])
            audits.append(_dense_unit(name, module, calls, mine, point, names))
        for label in audits[-1].not_flat:
            not_visible.setdefault(label, f"moves only {name}, but changes its output")
    tokens = max(recorder.rows.values(), default=0)
    notes = [
        f"units: coarsest submodules with at most {max_parameters:,} parameters audited "
        "densely; larger Linear/Conv1D layers by the rank of their recorded inputs; "
        "embeddings by the rows looked up",
        "a symmetry that moves parameters of several units is not a flat direction of any "
        "one unit: see not_visible",
    ]
    return LocalAuditReport(type(model).__name__, _size(model), audits, not_visible, tokens,
                            notes)  # fmt: skip


def _forward(model: nn.Module, x: Inputs) -> None:
    args, kwargs = call_arguments(model, x, "local_audit")
    with torch.no_grad(), KeepFloat64(), caches_off(model, x):
        model(*args, **kwargs)


def _wanted_samples(
    units: list[tuple[str, nn.Module, str]],
    recorder: _Recorder,
    per_sample: Mapping[str, float],
    chunk: int,
) -> int:
    """Samples so that each linear unit sees 2·(width + 1) input rows and each dense unit twice
    its parameters in output entries (both capped at :data:`MAX_TOKENS` rows)."""
    wanted = chunk
    for name, module, method in units:
        if method == "linear":
            width = recorder.widths.get(name, 0)
            rows = min(2 * width, MAX_TOKENS)
            wanted = max(wanted, math.ceil(rows / max(per_sample.get(name, 1.0), 1e-9)))
        elif method == "dense" and recorder.calls.get(name):
            outputs = sum(_outputs(module, call).numel() for call in recorder.calls[name])
            rate = outputs / chunk
            wanted = max(wanted, math.ceil(2 * _size(module) / max(rate, 1e-9)))
    return wanted


def _outputs(module: nn.Module, call: tuple[tuple[Any, ...], dict[str, Any]]) -> Tensor:
    with torch.no_grad():
        return every_output((module(*call[0], **call[1]),)).reshape(-1)


def _skip_note(module: nn.Module, limit: int) -> str:
    return (
        f"{type(module).__name__} with {_size(module):,} parameters of its own or in a leaf "
        f"that is neither linear nor an embedding: above max_parameters={limit:,}; not audited"
    )


def _embedding_unit(name: str, module: nn.Module, recorder: _Recorder) -> UnitAudit:
    assert isinstance(module, nn.Embedding)
    used = recorder.used.get(name)
    unused = int((used == 0).sum()) if used is not None else module.num_embeddings
    flat = unused * module.embedding_dim
    note = f"{unused} rows never looked up by the drawn tokens (data)" if unused else ""
    return UnitAudit(name, "embedding", _size(module), recorder.rows.get(name, 0), flat, 0, flat,
                     note=note)  # fmt: skip


def _linear_unit(
    name: str,
    module: nn.Module,
    recorder: _Recorder,
    mine: list[Entry],
    point: Mapping[str, Tensor],
    names: Mapping[int, str],
) -> UnitAudit:
    """Flat space R^{out} ⊗ null(Ã) from the R factor of the recorded [a, 1]; an entry counts
    where each of its tangents [ΔW, Δb] lies in it (coordinates T·N, N the null vectors)."""
    eps = torch.finfo(torch.float64).eps
    factor, rows = recorder.factors[name], recorder.rows[name]
    width = factor.shape[1]
    decision = decide_rank(torch.linalg.svdvals(factor), eps=eps, size=max(rows, width))
    half = decide_rank(
        torch.linalg.svdvals(recorder.half_factors[name]), eps=eps, size=max(rows, width)
    )
    null = torch.linalg.svd(factor)[2][decision.rank :].T  # (width, k), orthonormal
    conv1d = type(module).__name__ == "Conv1D"  # Hugging Face: weight stored (in, out)
    weight_t, bias_t = module.weight, getattr(module, "bias", None)
    assert isinstance(weight_t, Tensor)
    out = int(weight_t.shape[1] if conv1d else weight_t.shape[0])
    flat = out * null.shape[1]
    weight = names[id(weight_t)]
    bias = names[id(bias_t)] if isinstance(bias_t, Tensor) else None
    inside: list[str] = []
    not_flat: list[str] = []
    coordinates: list[Tensor] = []
    for entry in mine:
        tangent_of = entry.tangent_fn(point)

        def local_of(xi: Tensor, tangent_of: Any = tangent_of) -> tuple[Tensor, Tensor, Tensor]:
            tangent = tangent_of(xi)
            w = tangent.get(weight, torch.zeros_like(weight_t))
            matrix = w.T if conv1d else w  # (out, fan_in)
            if bias is not None and isinstance(bias_t, Tensor):
                b = tangent.get(bias, torch.zeros_like(bias_t))
                matrix = torch.cat([matrix, b[:, None]], dim=1)
            projected = matrix @ null  # (out, k): coordinates in R^{out} ⊗ null(Ã)
            outside = (matrix - projected @ null.T).norm()
            return projected.reshape(-1), outside, matrix.norm()

        row_vector = _reader_rows(entry, point, weight, bias, out)
        if row_vector is not None:  # a norm's readers: basis vector i moves row i by v
            v = row_vector.to(null.dtype)
            outside_v = (v - (v @ null) @ null.T).norm()
            if bool(outside_v > INSIDE_TOLERANCE * v.norm()):
                not_flat.append(entry.label)
                continue
            inside.append(entry.label)
            coordinates.append(torch.kron(torch.eye(out, dtype=v.dtype), (v @ null)[None, :]))
            continue
        basis = entry.basis()
        # one random combination first: outside the flat space, some basis tangent is too
        # (a head's query–key GL moves this unit's outputs: 4,096 full-size tangents spared)
        probe = torch.randn(basis.shape[0], generator=torch.Generator().manual_seed(0),
                            dtype=basis.dtype) @ basis  # fmt: skip
        _, probe_outside, probe_size = local_of(probe)
        if bool(probe_outside > INSIDE_TOLERANCE * probe_size):
            not_flat.append(entry.label)
            continue
        try:  # a batch of tangents at a time: each is as large as the weight
            local, outside, size_t = torch.func.vmap(local_of, chunk_size=LINEAR_CHUNK)(basis)
        except RuntimeError:  # an action vmap cannot batch: one tangent at a time
            parts = [local_of(xi) for xi in basis]
            local, outside, size_t = (torch.stack(p) for p in zip(*parts, strict=True))
        inside_all = bool((outside <= INSIDE_TOLERANCE * size_t).all())
        if inside_all and local.shape[0]:
            inside.append(entry.label)
            coordinates.append(local)
        else:
            not_flat.append(entry.label)
    stacked = torch.cat(coordinates) if coordinates else torch.zeros(0, flat, dtype=torch.float64)
    _, catalogue = _row_basis(stacked, eps, max(flat, 1))
    named = catalogue.rank
    determined = decision.determined and half.rank == decision.rank and catalogue.determined
    note = (
        f"{null.shape[1]} null direction(s) of its recorded inputs [a, 1], {flat - named} "
        "flat directions not named: a degenerate input (a feature that never varies) or a "
        "missing family"
        if flat - named
        else ""
    )
    ranks = {"flat": decision.to_dict(), "half": half.to_dict(), "catalogue": catalogue.to_dict()}
    return UnitAudit(name, "linear", _size(module), rows, flat, named, flat - named, inside,
                     determined, ranks, note, not_flat)  # fmt: skip


def _reader_rows(
    entry: Entry, point: Mapping[str, Tensor], weight: str, bias: str | None, out: int
) -> Tensor | None:
    """For a norm-reader translation whose one reader is this unit, v = [γ⁻¹, −Σβ/γ] (without
    the last entry where the unit has no bias): its basis vector i adds v to row i of the
    unit's [W, b] (:class:`~paramsym.symmetry.absorption.NormReaderTranslation`), so the
    tangents need not be formed (2,304 of GPT-2-small's c_attn size each); else ``None``."""
    s = entry.symmetry
    if entry.kernel is not None or type(s) is not NormReaderTranslation:
        return None
    if len(s.readers) != 1 or s.readers[0].weight != weight or s.outputs[0] != out:
        return None
    reader = s.readers[0]
    width = s.width
    gamma = point[s.weight] if s.weight is not None else torch.ones(width, dtype=torch.float64)
    inverse = 1.0 / gamma.to(torch.float64)
    if bias is None:
        return inverse
    if reader.bias != bias:
        return None
    total = (point[s.bias].to(torch.float64) * inverse).sum() if s.bias is not None else 0.0
    return torch.cat([inverse, -torch.as_tensor(total, dtype=torch.float64).reshape(1)])


def _dense_unit(
    name: str,
    module: nn.Module,
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
    mine: list[Entry],
    point: Mapping[str, Tensor],
    names: Mapping[int, str],
) -> UnitAudit:
    """J of the unit's outputs over its recorded calls, as many as fit
    :data:`DENSE_UNIT_ENTRIES` (reverse mode, or forward mode where a call has more outputs
    than P; float64), its rank at the gap from the R
    factor (first half and all), and the catalogue's span against its null space."""
    eps = torch.finfo(torch.float64).eps
    local = dict(module.named_parameters())
    keys = [names[id(p)] for p in local.values()]
    size = sum(p.numel() for p in local.values())
    if not calls:
        return UnitAudit(name, "dense", size, note="never called by the forward")
    blocks: list[Tensor] = []
    half_rows, rows = 0, 0
    for index, (args, kwargs) in enumerate(calls):

        def outputs(params: dict[str, Tensor], args: Any = args, kwargs: Any = kwargs) -> Tensor:
            result = torch.func.functional_call(module, params, args, kwargs)
            return every_output((result,)).reshape(-1)

        theta = {k: v.detach() for k, v in local.items()}
        with torch.no_grad(), KeepFloat64():
            count = outputs(theta).numel()
        if blocks and (rows + count) * size > DENSE_UNIT_ENTRIES:
            break  # the calls so far are as much as fits (the half: their first half)
        if count * size > DENSE_UNIT_ENTRIES:
            return UnitAudit(
                name, "skipped", size,
                note=f"one recorded call has {count:,} outputs: its Jacobian ({count:,} × "
                f"{size:,}) exceeds {DENSE_UNIT_ENTRIES:,} entries; record smaller calls "
                "(chunk=1) or lower max_parameters",
            )  # fmt: skip
        # forward mode (P columns) when a call has more outputs than the unit has parameters
        transform = torch.func.jacfwd if count > size else torch.func.jacrev
        with KeepFloat64(), differentiable_attention(module):  # the math kernel vmaps
            jac = transform(outputs)(theta)
        blocks.append(torch.cat([jac[k].reshape(jac[k].shape[0], -1) for k in local], dim=1))
        rows += blocks[-1].shape[0]
        if index + 1 == max(len(calls) // 2, 1):
            half_rows = rows
    if half_rows in (0, rows):  # one call, or the budget stopped before the calls' half
        half_rows = max(rows // 2, 1)
    jacobian = torch.cat(blocks)
    rows = jacobian.shape[0]
    half_factor = torch.linalg.qr(jacobian[:half_rows], mode="r")[1]
    factor = torch.linalg.qr(torch.cat([half_factor, jacobian[half_rows:]]), mode="r")[1]
    _, singular, vh = torch.linalg.svd(factor, full_matrices=factor.shape[0] < size)
    decision = decide_rank(singular, eps=eps, size=max(rows, size))
    half = decide_rank(torch.linalg.svdvals(half_factor), eps=eps, size=max(rows, size))
    null = vh[decision.rank :]
    top = float(singular[0]) if singular.numel() else 0.0
    level = math.sqrt(max(decision.last_kept, 1e-300) * max(decision.first_dropped, eps)) * top
    every: list[Tensor] = []
    inside: list[str] = []
    not_flat: list[str] = []
    for entry in mine:
        rows_t = stack(entry, point, keys)
        every.append(rows_t)
        moved = (factor @ rows_t.T).norm(dim=0)
        flat_entry = bool((moved <= level * rows_t.norm(dim=1).clamp_min(1e-300)).all())
        (inside if flat_entry else not_flat).append(entry.label)
    # named = dim(null J ∩ span T): what of the flat space T reaches, also through entries
    # that are not flat as a whole (of the shift of 1 into a block's two output biases, only
    # their difference is flat for the block)
    stacked = torch.cat(every) if every else jacobian.new_zeros(0, size)
    basis, catalogue = _row_basis(stacked, eps, size)
    missing, _ = _outside(null, basis, eps)
    flat = size - decision.rank
    determined = decision.determined and half.rank == decision.rank and missing.determined
    ranks = {"flat": decision.to_dict(), "half": half.to_dict(),
             "catalogue": catalogue.to_dict(), "missing": missing.to_dict()}  # fmt: skip
    return UnitAudit(name, "dense", size, rows, flat, flat - missing.rank, missing.rank, inside,
                     determined, ranks, "", not_flat)  # fmt: skip
