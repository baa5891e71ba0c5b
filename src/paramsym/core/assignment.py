"""Exact linear assignment of a large dense matrix: solved on a few candidates per row, proved
optimal for the whole matrix by linear-programming duality.

:func:`max_assignment` returns the permutation σ maximising Σ_i C[i, σ(i)] of a square float
matrix, the same problem as ``scipy.optimize.linear_sum_assignment(C, maximize=True)``, which
solves it densely: 0.6–0.8 s for each 3072 × 3072 cost matrix of GPT-2-small's feed-forward
units on one CPU thread, most of weight matching's time at that size. The optimum of such a
matrix nearly always takes, in each row, one of the row's largest entries. So:

1. **Candidates.** Each row's ``candidates`` largest entries, and the edges of a starting
   permutation (the current one in a coordinate descent; the identity by default), which makes
   a full matching exist on them.
2. **Sparse optimum.** The assignment restricted to the candidates, by scipy's sparse
   Jonker–Volgenant solver (LAPJVsp, ``scipy.sparse.csgraph.min_weight_full_bipartite_matching``).
3. **Certificate.** LP duality for the assignment problem: potentials u, v with
   u_i + v_j ≥ C[i, j] for *every* entry and u_i + v_σ(i) = C[i, σ(i)] on the matching bound
   every assignment's sum by Σ u + Σ v = Σ_i C[i, σ(i)], so σ is optimal. The potentials of the
   sparse optimum are the shortest-path distances of its residual graph (they exist because
   the matching is optimal on the candidates: the residual graph has no negative cycle),
   computed by a vectorised Bellman–Ford on the rows. The entries that violate them over the
   whole matrix (checked a block of rows at a time; at most ``candidates`` per row, the most
   violated) join the candidates, and step 2 runs again.

Every answer returned is certified, to rounding: no entry exceeds u_i + v_j by more than
:data:`TOLERANCE` × (the matrix's largest |entry|), so the sum is within n times that of the
optimum. Small matrices (below ``dense_below``), rectangular ones, and the cases the
candidates do not settle (more than :data:`MAX_ROUNDS` rounds, or more than
:data:`MAX_EDGES_PER_ROW` candidates per row: rows that all rank the columns alike) or whose
rounding spoils the potentials (Bellman–Ford not settling in n passes) are solved by
``scipy.optimize.linear_sum_assignment``, which is exact too. Measured on the twelve
3072-wide assignments of a GPT-2-small weight matching (one thread): 8.4 s densely, 2.2–2.4 s
here (two rounds each), the same permutations; ``benchmarks/bench_real_size.py``.
"""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.sparse
import scipy.sparse.csgraph
import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError

CANDIDATES = 32
"""How many of each row's largest entries the sparse problem starts from."""

DENSE_BELOW = 1024
"""Matrices narrower than this are solved densely (a dense solve of 768 × 768 takes 20 ms)."""

MAX_ROUNDS = 8
"""Rounds of step 2–3 after which the dense solver takes over."""

MAX_EDGES_PER_ROW = 64
"""The dense solver takes over where the violated entries would grow the candidates beyond
this many per row (a matrix whose rows all rank the columns alike violates half of its
entries, and the sparse solver is slower than the dense one on such a graph)."""

TOLERANCE = 1e-12
"""Largest violation of the dual certificate accepted, relative to max |C| (rounding of the
potentials' float64 sums)."""

_CHECK_ROWS = 256  # rows checked at a time: a (256, n) float64 block, cache-sized


def max_assignment(
    cost: np.ndarray,
    *,
    start: np.ndarray | Tensor | None = None,
    candidates: int = CANDIDATES,
    dense_below: int = DENSE_BELOW,
) -> np.ndarray:
    """The columns σ (``(n,)`` int64, a permutation) maximising Σ_i ``cost[i, σ(i)]``.

    Args:
        cost: ``(n, m)`` float array (float64 is used), finite.
        start: a permutation whose edges join the candidates (the current assignment of a
            coordinate descent); the identity when None.
        candidates: how many of each row's largest entries the sparse problem starts from.
        dense_below: below this width, ``scipy.optimize.linear_sum_assignment`` solves it.

    Returns the same optimum as ``scipy.optimize.linear_sum_assignment(cost, maximize=True)[1]``
    (up to ties and rounding, see the module docstring).

    >>> import numpy as np
    >>> cost = np.random.default_rng(0).standard_normal((2048, 2048))
    >>> sigma = max_assignment(cost)
    >>> import scipy.optimize
    >>> bool((sigma == scipy.optimize.linear_sum_assignment(cost, maximize=True)[1]).all())
    True
    """
    matrix = np.asarray(cost, dtype=np.float64)
    if matrix.ndim != 2:
        raise InvalidArgumentError(
            f"max_assignment: cost must be a matrix, got shape {matrix.shape}"
        )
    if not np.isfinite(matrix).all():
        raise InvalidArgumentError(
            "max_assignment: cost has non-finite entries (nan or inf); pass a finite matrix"
        )
    if candidates < 1:
        raise InvalidArgumentError(
            f"max_assignment: candidates must be at least 1, got {candidates}"
        )
    n, m = matrix.shape
    if n != m or n < max(dense_below, 2) or candidates >= n:
        return _dense(matrix)
    first = np.arange(n) if start is None else np.asarray(start, dtype=np.int64)
    if first.shape != (n,) or not np.array_equal(np.sort(first), np.arange(n)):
        raise InvalidArgumentError(f"max_assignment: start must be a permutation of {n} columns")
    if not matrix.flags.writeable:  # torch.from_numpy warns on read-only arrays
        matrix = matrix.copy()
    solved = _certified(torch.from_numpy(matrix), torch.from_numpy(first), candidates)
    return _dense(matrix) if solved is None else solved[0]


def _dense(matrix: np.ndarray) -> np.ndarray:
    return scipy.optimize.linear_sum_assignment(matrix, maximize=True)[1].astype(np.int64)


def _certified(c: Tensor, start: Tensor, candidates: int) -> tuple[np.ndarray, int] | None:
    """Steps 1–3 of the module docstring: the certified optimum and the rounds it took, or None
    where the dense solver must take over."""
    n = c.shape[0]
    high, low = float(c.max()), float(c.min())
    offset = (high - low) or 1.0  # the weights below lie in [offset, 2 offset]
    tolerance = TOLERANCE * max(abs(high), abs(low))

    def weight(i: Tensor, j: Tensor) -> Tensor:
        """Minimised: w = high − C + offset > 0, positive as the sparse solver needs."""
        return (high - c[i, j]) + offset

    top = torch.topk(c, candidates, dim=1, sorted=False).indices
    rows = torch.cat([torch.arange(n).repeat_interleave(candidates), torch.arange(n)])
    cols = torch.cat([top.reshape(-1), start])
    d = torch.zeros(n, dtype=torch.float64)
    for rounds in range(1, MAX_ROUNDS + 1):
        key = torch.unique(rows * n + cols)
        rows, cols = key // n, key % n
        weights = weight(rows, cols)
        graph = scipy.sparse.csr_array(
            (weights.numpy(), (rows.numpy(), cols.numpy())), shape=(n, n)
        )
        matched = torch.from_numpy(
            scipy.sparse.csgraph.min_weight_full_bipartite_matching(graph)[1]
        ).long()
        on_matching = weight(torch.arange(n), matched)
        potentials = _row_potentials(rows, cols, weights, matched, on_matching, d)
        if potentials is None:
            return None
        d, dcol = potentials
        # u_i + v_j ≥ C[i, j] with u_i = high + offset + d_i, v_j = −dcol_j.
        limit = (high + offset + tolerance) + d
        violated = _violations(c, dcol, limit, candidates)
        if violated is None:
            return matched.numpy(), rounds
        if rows.numel() + violated[0].numel() > MAX_EDGES_PER_ROW * n:
            return None
        rows, cols = torch.cat([rows, violated[0]]), torch.cat([cols, violated[1]])
    return None


def _row_potentials(
    rows: Tensor,
    cols: Tensor,
    weights: Tensor,
    matched: Tensor,
    on_matching: Tensor,
    start: Tensor,
) -> tuple[Tensor, Tensor] | None:
    """Potentials of the candidate graph's optimal matching (row i ↦ column ``matched[i]``,
    weight ``on_matching[i]``):
    row distances d and column distances dcol with w_ij + d_i − dcol_j ≥ 0 on every candidate
    and = 0 on the matching; None if rounding left a negative cycle.

    The residual graph's paths alternate an unmatched edge i → j and the matched edge back from
    j to its row i′, so on the rows alone an arc i → i′ weighs w_ij − w_i′j; d is its shortest
    distance from a source joined to each row i by an arc of weight ``start[i]`` (Bellman–Ford
    from d = ``start``, one vectorised relaxation of every arc per pass; any start gives valid
    potentials, and the previous round's settles in fewer passes than zeros), and
    dcol_j = d_i′ + w_i′j."""
    n = matched.shape[0]
    owner = torch.empty_like(matched)
    owner[matched] = torch.arange(n)
    target = owner[cols]
    arc = weights - on_matching[target]
    d = start
    for _ in range(n):
        relaxed = d.scatter_reduce(0, target, d[rows] + arc, "amin")
        if torch.equal(relaxed, d):
            dcol = torch.empty_like(d)
            dcol[matched] = d + on_matching
            return d, dcol
        d = relaxed
    return None


def _violations(
    c: Tensor, dcol: Tensor, limit: Tensor, per_row: int
) -> tuple[Tensor, Tensor] | None:
    """The entries with C[i, j] + dcol_j > limit_i, at most ``per_row`` of each row's most
    violated ones (rows, columns), or None where there are none; a block of rows at a time."""
    n = c.shape[0]
    found: list[tuple[Tensor, Tensor]] = []
    block = torch.empty((min(_CHECK_ROWS, n), n), dtype=torch.float64)
    for begin in range(0, n, _CHECK_ROWS):
        part = block[: min(_CHECK_ROWS, n - begin)]
        torch.add(c[begin : begin + part.shape[0]], dcol, out=part)
        part.sub_(limit[begin : begin + part.shape[0], None])  # the excess over u_i + v_j
        bad = torch.nonzero(part.amax(dim=1) > 0).squeeze(1)
        if bad.numel():
            excess, j = torch.topk(part[bad], min(per_row, n), dim=1)
            i = bad[:, None].expand_as(j)
            found.append((i[excess > 0] + begin, j[excess > 0]))
    if not found:
        return None
    return torch.cat([i for i, _ in found]), torch.cat([j for _, j in found])
