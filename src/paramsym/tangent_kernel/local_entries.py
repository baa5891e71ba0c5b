"""The catalogue as the units of :func:`~paramsym.tangent_kernel.local_completeness.local_audit` see
it: each symmetry that moves one unit, and the single-unit parts of those that move several."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.symmetry import Symmetry

LOCAL_PART_DIM = 512
LOCAL_PART_ENTRIES = 50_000_000
"""The largest algebra, and tangent matrix (dim × moved parameters), of a symmetry spanning
several units whose single-unit part is computed (:func:`entries_by_unit`: one tangent per basis
element, each as large as the tensors the symmetry moves and reads)."""


@dataclass(frozen=True)
class Entry:
    """A catalogue entry as one unit sees it: a symmetry's whole algebra (``kernel=None``) or
    the elements ``kernel`` (rows, ``(z, dim)``) of it that move nothing outside the unit."""

    label: str
    symmetry: Symmetry
    kernel: Tensor | None = None

    def basis(self) -> Tensor:
        """The algebra elements the entry stands for, as rows: the basis, or the kernel."""
        if self.kernel is None:
            return torch.eye(self.symmetry.dim, dtype=torch.float64)
        return self.kernel

    def tangent_fn(self, point: Mapping[str, Tensor]) -> Callable[[Tensor], dict[str, Tensor]]:
        """ξ ↦ tangent(θ, ξ) over the tensors the symmetry moves (reading what it reads)."""
        s = self.symmetry
        sub = {k: point[k] for k in dict.fromkeys((*s.parameter_names, *s.reads))}
        return lambda xi: s.tangent(sub, xi)

    def tangents(self, point: Mapping[str, Tensor]) -> Iterator[dict[str, Tensor]]:
        """tangent(θ, ξ) for ξ over the basis (or the kernel's rows), one at a time (at real
        sizes the stacked tangents of one family do not fit in memory)."""
        tangent = self.tangent_fn(point)
        for xi in self.basis():
            yield tangent(xi)


def tangent_rows(s: Symmetry, point: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Tensor name -> the tangents on it over the algebra's basis, stacked ``(dim, *shape)``."""
    moved = list(Entry(s.name, s).tangents(point))
    return {k: torch.stack([m[k] for m in moved]) for k in s.parameter_names if k in moved[0]}


def entries_by_unit(
    counted: list[Symmetry],
    point: Mapping[str, Tensor],
    owner: Mapping[str, str],
    skipped: set[str],
) -> tuple[dict[str, list[Entry]], dict[str, str]]:
    """Unit -> the catalogue entries it can see, and the entries no unit sees (with why).

    A symmetry that moves one unit's parameters is that unit's entry. One that moves several
    units is not visible locally, but the part of its algebra whose tangents vanish outside a
    unit is a flat direction of that unit (GPT-2's shift of the all-ones vector, for example,
    between a block's two output biases): computed for algebras up to :data:`LOCAL_PART_DIM`
    whose tangents fit (:data:`LOCAL_PART_ENTRIES`)."""
    entries: dict[str, list[Entry]] = {}
    hidden: dict[str, str] = {}
    for s in counted:
        spans = sorted({owner.get(n, "(no unit)") for n in s.parameter_names})
        if len(spans) == 1 and spans[0] not in skipped and spans[0] in owner.values():
            entries.setdefault(spans[0], []).append(Entry(s.name, s))
            continue
        hidden[s.name] = "moves " + ", ".join(spans)
        size = sum(point[n].numel() for n in s.parameter_names)
        if s.dim > LOCAL_PART_DIM or s.dim * size > LOCAL_PART_ENTRIES:
            continue
        rows = tangent_rows(s, point)
        for unit in spans:
            if unit in skipped or unit == "(no unit)":
                continue
            outside = torch.cat(
                [t.reshape(s.dim, -1) for k, t in rows.items() if owner.get(k) != unit], dim=1
            )  # (dim, columns outside the unit); its left null space is wanted, (dim, dim) only
            wide = outside.shape[1] < outside.shape[0]
            _, singular, vh = torch.linalg.svd(outside.T, full_matrices=wide)
            rank = int((singular > 1e-12 * singular.max()).sum()) if singular.numel() else 0
            kernel = vh[rank:]  # (z, dim): algebra elements moving nothing outside the unit
            if kernel.shape[0]:
                label = f"{s.name} (part in {unit})"
                entries.setdefault(unit, []).append(Entry(label, s, kernel))
    return entries, hidden


def flat_over(
    tangent: Mapping[str, Tensor], point: Mapping[str, Tensor], keys: list[str]
) -> Tensor:
    parts = [tangent[k].reshape(-1) if k in tangent else point[k].new_zeros(point[k].numel())
             for k in keys]  # fmt: skip
    return torch.cat(parts)


def stack(entry: Entry, point: Mapping[str, Tensor], keys: list[str]) -> Tensor:
    """The entry's tangents as rows over the tensors ``keys`` (zeros where it does not move
    one)."""
    rows = [flat_over(t, point, keys) for t in entry.tangents(point)]
    size = sum(point[k].numel() for k in keys)
    return torch.stack(rows) if rows else torch.zeros(0, size, dtype=torch.float64)
