"""Dense null spaces of stacked constraint rows, and the sample count they need.

All rows contributed by one parameter draw θ share the factor θ, so one draw adds at most
rank{∇ℓ(θ; batches)} independent rows however many batches it sees (notes 001c §10). Each
draw's rows are scaled (row b by 1 / (‖g_b‖ ‖θ‖): a row scaling leaves the null space
unchanged, and a basis element B with ‖B‖ ≤ 1 then has entries ≤ 1), and the number of draws
is chosen from the rank the first draw contributes:

    S = max(2, ⌈safety · K / r₁⌉),  made even,

so that the first half of the draws already gives safety/2 times as many independent rows as
unknowns, and the stability check (half against all, notes §10) can pass. The stacked blocks
are reduced by QR (the R factor keeps every singular value) before the SVD.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from paramsym.core.linalg import svd

ROW_RANK_RTOL = 1e-9
"""A draw's rows count as independent down to this fraction of their largest singular value."""

SAFETY = 3.0
"""Rows per unknown that the whole system aims at (the first half gets half of it)."""


def compress(rows: Tensor, scales: Tensor, rank: bool = False) -> tuple[Tensor, int]:
    """Rows (b, K) divided by ``scales`` (b,), reduced to their R factor when b > K (the same
    Gram matrix); with ``rank``, also their numerical rank (``ROW_RANK_RTOL``, else -1).

    The scale of a row is ‖g_b‖ · ‖θ‖ (Cauchy–Schwarz for ⟨g_b, B_j θ⟩ with ‖B_j‖ ≤ 1), not the
    row's own norm: a row that is zero because every basis element is a symmetry stays zero
    instead of being blown up to unit norm. Rows with zero scale (zero gradient) are dropped.
    """
    keep = scales > 0
    rows = rows[keep] / scales[keep, None]
    if rows.shape[0] == 0:
        return rows, 0
    measured = -1
    if rank:
        s = torch.linalg.svdvals(rows)
        measured = int((s > max(float(s[0]), 1.0) * ROW_RANK_RTOL).sum())
    if rows.shape[0] > rows.shape[1]:
        rows = torch.linalg.qr(rows, mode="r").R
    return rows, measured


def draws_needed(unknowns: int, rank: int, safety: float = SAFETY) -> int:
    """Parameter draws for ``unknowns`` coefficients when each draw adds ``rank`` rows (even,
    at least 2)."""
    count = max(2, math.ceil(safety * unknowns / max(rank, 1)))
    return count + (count % 2)


class StackedSystem:
    """Constraint blocks, one per parameter draw, in a fixed order; solves prefixes of them."""

    def __init__(self, unknowns: int) -> None:
        self.unknowns = unknowns
        self.blocks: list[Tensor] = []
        self._factors: dict[int, Tensor] = {}

    def add(self, block: Tensor) -> None:
        self.blocks.append(block)

    def rows(self, count: int) -> int:
        return sum(int(b.shape[0]) for b in self.blocks[:count])

    def factor(self, count: int) -> Tensor:
        """R factor of the first ``count`` blocks (shape (min(rows, K), K))."""
        if count in self._factors:
            return self._factors[count]
        start = max((c for c in self._factors if c <= count), default=0)
        parts = ([self._factors[start]] if start else []) + self.blocks[start:count]
        stacked = torch.cat(parts) if parts else torch.zeros(0, self.unknowns, dtype=torch.float64)
        r = torch.linalg.qr(stacked, mode="r").R if stacked.shape[0] > self.unknowns else stacked
        self._factors[count] = r
        return r

    def singular_values(self, count: int) -> Tensor:
        """Singular values of the first ``count`` blocks, padded with zeros to K, descending."""
        r = self.factor(count)
        s = torch.linalg.svdvals(r) if r.numel() else r.new_zeros(0)
        return _pad(s, self.unknowns)

    def svd(self, count: int) -> tuple[Tensor, Tensor]:
        """(singular values of the first ``count`` blocks padded with zeros to K, descending;
        the (K, K) matrix of right singular vectors as rows)."""
        r = self.factor(count)
        if r.shape[0] == 0:
            eye = torch.eye(self.unknowns, dtype=torch.float64)
            return torch.zeros(self.unknowns, dtype=torch.float64), eye
        _, s, vh = svd(r, full_matrices=True)
        return _pad(s, self.unknowns), vh


def _pad(s: Tensor, size: int) -> Tensor:
    if s.numel() >= size:
        return s[:size]
    return torch.cat([s, s.new_zeros(size - s.numel())])
