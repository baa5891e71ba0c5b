"""Numerical rank decided at the widest gap of a spectrum, and said when it is not determined.

A fixed threshold (``torch.linalg.matrix_rank``'s ``max(m, n)·eps·σ₁``) counts rounding noise
as rank wherever a model computes part of its function in a lower precision than the matrix
(Hugging Face's RMSNorm runs in float32 inside a float64 model: its flat directions sit near
1e-9·σ₁, notes 006 §1), and misses genuine directions below it. A rank is a statement about a
gap: the singular values fall by many decades between the last one counted and the first one
left out. :func:`decide_rank` puts the rank at the widest such drop and calls it determined
only when that drop is wide (:data:`MIN_GAP_DECADES`) and clearly wider than every other drop
of the spectrum (:data:`MIN_MARGIN_DECADES`), so two candidate ranks are never silently
resolved.

>>> import torch
>>> s = torch.tensor([3.0, 1.0, 0.5, 1e-12, 5e-13], dtype=torch.float64)
>>> decision = decide_rank(s, eps=torch.finfo(torch.float64).eps, size=5)
>>> decision.rank, decision.determined, round(decision.gap_decades, 1)
(3, True, 11.7)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

MIN_GAP_DECADES = 3.0
"""A rank is determined only where the singular values drop by at least this many decades."""

MIN_MARGIN_DECADES = 2.0
"""... and that drop is this many decades wider than the second widest one."""


@dataclass(frozen=True)
class RankDecision:
    """A numerical rank and the gap that decides it.

    Attributes:
        rank: the number of singular values above the gap.
        size: the number of singular values there are (``min`` of the matrix's dimensions).
        last_kept: σ_rank / σ₁ (1.0 for a full spectrum's first value; 0.0 when rank is 0).
        first_dropped: σ_{rank+1} / σ₁ (0.0 when the rank is full).
        gap_decades: log10 of last_kept / first_dropped (against the rounding floor
            ``size·eps`` when nothing is dropped).
        runner_up_decades: the second widest drop of the spectrum, in decades.
        determined: the gap is at least :data:`MIN_GAP_DECADES` and beats the runner-up by
            :data:`MIN_MARGIN_DECADES`.
    """

    rank: int
    size: int
    last_kept: float
    first_dropped: float
    gap_decades: float
    runner_up_decades: float
    determined: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """``"6205 (gap 6.8e-07 → 5.4e-16)"``, with ``", not determined"`` where it is not."""
        text = f"{self.rank} (gap {self.last_kept:.1e} → {self.first_dropped:.1e})"
        return text if self.determined else f"{text}, not determined"


def decide_rank(
    singular_values: Tensor,
    *,
    eps: float,
    size: int | None = None,
    reference: float | None = None,
) -> RankDecision:
    """The rank of a matrix from its singular values (any order, non-negative), at the widest
    drop of log σ.

    Args:
        singular_values: the spectrum, shape ``(k,)``.
        eps: the machine epsilon of the precision the matrix was computed in; values below
            ``size·eps·σ₁`` are rounding noise, and a spectrum with no drop below that floor is
            full rank when its smallest value is :data:`MIN_GAP_DECADES` above the floor.
        size: the larger dimension of the matrix (default ``k``), for the floor.
        reference: the scale the values are measured against, when it is known rather than σ₁
            (1 for the sines of principal angles between subspaces): then rank 0 is a candidate
            too (every value far below the reference), and the ratios are to the reference.

    >>> decide_rank(torch.tensor([1e-9, 1e-10]), eps=2.2e-16, reference=1.0).rank
    0
    """
    values = singular_values.detach().to(torch.float64).flatten().sort(descending=True).values
    if reference is not None:
        top = torch.tensor([float(reference)], dtype=torch.float64)
        decision = decide_rank(torch.cat([top, values]), eps=eps, size=size)
        kept = decision.rank - 1
        return RankDecision(
            kept,
            int(values.numel()),
            decision.last_kept if kept else 1.0,
            decision.first_dropped,
            decision.gap_decades,
            decision.runner_up_decades,
            decision.determined,
        )
    count = int(values.numel())
    if count == 0 or float(values[0]) == 0.0:
        return RankDecision(0, count, 0.0, 0.0, math.inf, 0.0, True)
    relative = (values / values[0]).tolist()
    floor = max(size or count, count) * eps
    logs = [math.log10(max(r, floor * 1e-6)) for r in relative]
    # drops[k] is the fall after keeping k + 1 values; the last one is against the floor
    drops = [logs[k] - logs[k + 1] for k in range(count - 1)]
    drops.append(logs[-1] - math.log10(floor))
    order = sorted(range(count), key=drops.__getitem__, reverse=True)
    best = order[0]
    runner_up = drops[order[1]] if count > 1 else 0.0
    rank = best + 1
    gap = drops[best]
    if rank == count and gap <= 0.0:  # everything is noise below the floor but σ₁ itself
        rank = 1
    determined = gap >= MIN_GAP_DECADES and gap - runner_up >= MIN_MARGIN_DECADES
    first_dropped = relative[rank] if rank < count else 0.0
    return RankDecision(
        rank, count, relative[rank - 1], first_dropped, gap, max(runner_up, 0.0), determined
    )
