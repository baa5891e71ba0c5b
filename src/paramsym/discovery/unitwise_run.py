"""Sampling and assembly for the unit-wise solver (:mod:`paramsym.discovery.unitwise`).

Every parameter draw runs one forward-backward pass per batch through the MLP chain and keeps,
per example, each layer's input a, output z, the slope σ'(z) and the mask g ≠ 0 of the units
whose gradient is non-zero. The number of draws follows the same rule as the dense solver
(3 rows per unknown, from the rank the first draw adds to a few unit systems), and the
dimension is checked against the first half of the draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.discovery.ansatz import LayerPairAnsatz, PairBlock
from paramsym.discovery.result import Decision, decide, relative
from paramsym.discovery.sampling import (
    Batch,
    DataStream,
    LossFn,
    ParameterSampler,
    draw_sample,
)
from paramsym.discovery.solve import ROW_RANK_RTOL, StackedSystem, compress, draws_needed
from paramsym.discovery.unitwise import Chain, UnitSolution, record, solve_units, unit_coefficients
from paramsym.errors import DiscoveryError, InvalidArgumentError

PROBED_UNITS = 3
"""Unit systems per layer whose rank the first draw is measured on."""


def _block(ansatz: LayerPairAnsatz, side: str, layer: str) -> PairBlock | None:
    for block in ansatz.pair_blocks:
        if block.side == side and block.module == layer:
            return block
    return None


def _rank(rows: Tensor) -> int:
    if rows.shape[0] == 0:
        return 0
    s = torch.linalg.svdvals(rows)
    return int((s > s[0] * ROW_RANK_RTOL).sum()) if float(s[0]) > 0 else 0


class _Rows:
    """Per-example rows of every unit system, appended draw by draw."""

    def __init__(self, hidden: int) -> None:
        self.z: list[list[Tensor]] = [[] for _ in range(hidden)]
        self.a: list[list[Tensor]] = [[] for _ in range(hidden)]
        self.slope: list[list[Tensor]] = [[] for _ in range(hidden)]
        self.mask: list[list[Tensor]] = [[] for _ in range(hidden)]
        self.x: list[Tensor] = []
        self.x_mask: list[Tensor] = []
        self.per_draw: list[int] = []

    def stacked(self, parts: Sequence[Tensor], draws: int) -> Tensor:
        rows = sum(self.per_draw[:draws])
        return torch.cat(list(parts))[:rows]


class _Part:
    """The unit systems of one hidden layer (or of the inputs, ``layer = -1``): the latest
    solution of each unit, and the units still unstable (half ≠ all of their draws)."""

    def __init__(self, layer: int, left: PairBlock | None, right: PairBlock | None) -> None:
        self.layer = layer
        self.left = left
        self.right = right
        self.solution: UnitSolution | None = None
        self.pending: set[int] = set()

    def merge(self, new: UnitSolution) -> None:
        if self.solution is None:
            self.solution = new
            units = list(range(len(new.vectors)))
        else:
            units = sorted(self.pending)
            old = self.solution
            for unit in units:
                old.values[unit] = new.values[unit]
                old.vectors[unit] = new.vectors[unit]
                old.dims[unit] = new.dims[unit]
                old.half_dims[unit] = new.half_dims[unit]
                old.ambiguous[unit] = new.ambiguous[unit]
                old.gaps[unit] = new.gaps[unit]
        solution = self.solution
        self.pending = {u for u in units if int(solution.dims[u]) != int(solution.half_dims[u])}

    @property
    def dim(self) -> int:
        return 0 if self.solution is None else int(self.solution.dims.sum())

    @property
    def half_dim(self) -> int:
        return 0 if self.solution is None else int(self.solution.half_dims.sum())


def run_unitwise(
    chain: Chain,
    ansatz: LayerPairAnsatz,
    loss_fn: LossFn,
    stream: DataStream,
    sampler: ParameterSampler,
    fixed: Batch | None,
    samples: int | None,
    max_samples: int | None,
    batches_per_sample: int,
    rtol: float,
    min_gap: float,
) -> dict[str, Any]:
    """Draw, solve every unit system and the output block, and return the fields of the
    dense solver's ``Outcome``."""
    layers = ansatz.layers
    hidden = len(layers) - 1
    rows = _Rows(hidden)
    output = _block(ansatz, "left", layers[-1]) if ansatz.output_block else None
    inputs = _block(ansatz, "right", layers[0]) if ansatz.input_block else None
    out_system = StackedSystem(output.size**2) if output is not None else None
    points: list[Params] = []
    out_ranks: list[int] = []
    evaluations = 0

    def draw() -> None:
        nonlocal evaluations
        point, batches = draw_sample(sampler, stream, fixed, batches_per_sample, points)
        count = 0
        out_rows: list[Tensor] = []
        out_scales: list[Tensor] = []
        for x, y in batches:
            if not isinstance(x, Tensor):  # an nn.Sequential takes one tensor
                raise InvalidArgumentError(
                    "discover_symmetries: the unit-wise solver runs an nn.Sequential MLP, whose "
                    "input is one tensor, not keyword inputs"
                )
            rec = record(chain, loss_fn, point, (x, y), input_grad=inputs is not None)
            evaluations += 1
            k = rec.inputs[0].shape[0]
            count += k
            for layer in range(hidden):
                grad = rec.input_grads[layer + 1]
                assert grad is not None
                rows.z[layer].append(rec.outputs[layer].reshape(k, -1))
                rows.a[layer].append(rec.inputs[layer + 1].reshape(k, -1))
                rows.slope[layer].append(rec.slopes[layer].reshape(k, -1))
                rows.mask[layer].append(grad.reshape(k, -1) != 0)
            if inputs is not None:
                grad0 = rec.input_grads[0]
                assert grad0 is not None
                rows.x.append(rec.inputs[0].reshape(k, -1))
                rows.x_mask.append(grad0.reshape(k, -1) != 0)
            if output is not None:
                delta, z = rec.output_grads[-1].reshape(k, -1), rec.outputs[-1].reshape(k, -1)
                out_rows.append((delta[:, :, None] * z[:, None, :]).reshape(k, -1))
                out_scales.append(delta.norm(dim=1) * z.norm(dim=1))
        rows.per_draw.append(count)
        if out_system is not None:
            block, rank = compress(torch.cat(out_rows), torch.cat(out_scales), rank=not out_ranks)
            out_system.add(block)
            out_ranks.append(rank)

    draw()
    needs = []
    for layer in range(hidden):
        z, a = rows.z[layer][0], rows.a[layer][0]
        slope, mask = rows.slope[layer][0], rows.mask[layer][0]
        width = z.shape[1]
        probes = sorted({0, width // 2, width - 1})[:PROBED_UNITS]
        rank = min(_rank(torch.cat([z * slope[:, [i]], a], dim=1)[mask[:, i]]) for i in probes)
        needs.append((width + a.shape[1], rank))
        # a unit's left row is seen only where σ'(z_i) ≠ 0. Planned from the mean activity
        # (units are exchangeable under a re-drawn init); a unit that is rarer is re-solved
        # with doubled draws until it is stable
        active = ((slope * mask) != 0).sum(dim=0).double()
        needs.append((width, max(1, int(active.mean()))))
    if inputs is not None:
        needs.append((rows.x[0].shape[1], _rank(rows.x[0])))
    if out_system is not None:
        needs.append((out_system.unknowns, out_ranks[0]))
    if any(rank == 0 for _, rank in needs):
        raise DiscoveryError(
            "discover_symmetries: the first parameter draw gives no constraint on some unit "
            "systems (all their loss gradients are zero); check the loss and the data"
        )
    count = samples if samples is not None else max(draws_needed(u, r) for u, r in needs)
    cap = max_samples if max_samples is not None else 16 * count
    dims: dict[int, int] = {}
    parts: list[_Part] = [
        _Part(
            layer, _block(ansatz, "left", layers[layer]), _block(ansatz, "right", layers[layer + 1])
        )
        for layer in range(hidden)
    ]
    if inputs is not None:
        parts.append(_Part(-1, None, inputs))
    out_decision: Decision | None = None
    out_half = 0
    out_values = torch.zeros(0, dtype=torch.float64)
    out_vh: Tensor | None = None
    out_stable = False
    while True:
        while len(rows.per_draw) < count:
            draw()
        half = count // 2
        half_rows = sum(rows.per_draw[:half])
        for part in parts:
            if part.solution is not None and not part.pending:
                continue
            right: Tensor | None = None
            if part.layer >= 0:
                z = rows.stacked(rows.z[part.layer], count)
                right = rows.stacked(rows.a[part.layer], count)
                slope = rows.stacked(rows.slope[part.layer], count)
                mask = rows.stacked(rows.mask[part.layer], count)
            else:
                z = rows.stacked(rows.x, count)
                mask = rows.stacked(rows.x_mask, count)
                slope = torch.ones_like(mask, dtype=z.dtype)
            solution = solve_units(
                z, right, slope, mask, half_rows, rtol, min_gap,
                units=None if part.solution is None else sorted(part.pending),
            )  # fmt: skip
            part.merge(solution)
        if out_system is not None and not out_stable:
            out_half = decide(relative(out_system.singular_values(half), 1.0), rtol, min_gap).dim
            values, out_vh = out_system.svd(count)
            out_values = relative(values, 1.0)
            out_decision = decide(out_values, rtol, min_gap)
            out_stable = out_half == out_decision.dim
        full_dim = sum(p.dim for p in parts) + (out_decision.dim if out_decision else 0)
        half_dim = sum(p.half_dim for p in parts) + (out_half if out_decision else 0)
        dims[half] = half_dim
        dims[count] = full_dim
        if half_dim == full_dim or samples is not None or 2 * count > cap:
            break
        count *= 2
    indices: list[Tensor] = []
    entries: list[Tensor] = []
    solutions = []
    for part in parts:
        assert part.solution is not None
        idx, val = unit_coefficients(ansatz, part.left, part.right, part.solution)
        indices += idx
        entries += val
        solutions.append(part.solution)
    if out_decision is not None and output is not None and out_vh is not None:
        size = output.size**2
        for column in out_vh[size - out_decision.dim :]:
            indices.append(output.start + torch.arange(size))
            entries.append(column)
    d = len(indices)
    if d:
        columns = torch.cat([torch.full((len(i),), j) for j, i in enumerate(indices)])
        coefficients = torch.sparse_coo_tensor(
            torch.stack([torch.cat(indices), columns]),
            torch.cat(entries),
            (ansatz.size, d),
            check_invariants=False,
        ).coalesce()
    else:
        coefficients = torch.zeros(ansatz.size, 0, dtype=torch.float64).to_sparse()
    all_values = [v for s in solutions for v in s.values] + [out_values]
    values = torch.sort(torch.cat(all_values), descending=True).values
    ambiguous = any(bool(s.ambiguous.any()) for s in solutions) or (
        out_decision is not None and out_decision.ambiguous
    )
    gaps = [float(s.gaps.min()) for s in solutions if s.gaps.numel()]
    if out_decision is not None:
        gaps.append(out_decision.gap)
    zeros = [v for v in values.tolist() if v <= rtol]
    nonzero = [v for v in values.tolist() if v > rtol]
    decision = Decision(
        dim=d,
        gap=min(gaps) if gaps else float("inf"),
        smallest_nonzero=min(nonzero) if nonzero else None,
        largest_zero=max(zeros) if zeros else None,
        ambiguous=ambiguous,
    )
    notes = [
        "unit-wise solver: each hidden unit's constraint solved on its own (symmetries of each "
        "layer pair as a subnetwork, Prop. 6.4.1); the output block coupled; singular values "
        "are per unit system, relative to that unit's scale; gap is the smallest over units"
    ]
    return {
        "values": values,
        "decision": decision,
        "half_dim": half_dim,
        "coefficients": coefficients,
        "samples": count,
        "dims_by_samples": dims,
        "rank_per_sample": min(r for _, r in needs),
        "rows": sum(rows.per_draw[:count]),
        "unknowns": ansatz.size,
        "gradient_evaluations": evaluations,
        "points": points,
        "notes": notes,
    }
