"""Directions of a linear feature space that no reader reads.

A feature space of width n joined only by linear maps (a residual stream without norms: writers
``W_w x_w + c_w`` added into it, readers ``R_r h + b_r`` reading it; one linear map after
another is the simplest case) carries the invertible group GL(n) of the stream
(:class:`~paramsym.symmetry.HiddenGL`), and more when the maps around it do not span it. Where the
readers that see a writer's output stack to fewer than n rows (r), whatever the writer adds
along their common null space K (n × (n − r)) nobody reads:

    (W_w, c_w) ↦ (W_w + K M, c_w + K m)      for any M, m      (:class:`UnreadTranslation`).

A residual MLP whose output map is narrower than its stream has them on its block's last map
(its output reaches the output map only). The dual, a reader of a vector that its writers
confine to a subspace, is :class:`~paramsym.symmetry.subspace.SubspaceReaderTranslation`.

The action is exact for every input, an action of (R^k, +) that shifts the parameters it moves
by amounts depending on the group element and on parameters it reads and leaves fixed (the
readers' weights, :attr:`~paramsym.symmetry.Symmetry.reads`), like the absorbed translations of
:mod:`paramsym.symmetry.absorption`: gradient transport is exact along it. It is new beyond
GL(n) where the stream has several writers or readers, or where the writer has more inputs than
n; where GL(n) acts it overlaps its orbit (the audit counts the span).

The null-space basis is smooth in what it reads: for an (r × n) matrix A of rank r, with r
columns P where A is best conditioned (pivots of a partially pivoted LU of Aᵀ, chosen anew at
each call: a discrete choice, constant near the point) and the other columns F, the columns of
``K[P] = −A_P⁻¹ A_F, K[F] = I`` span null(A).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from paramsym.errors import InvalidArgumentError, MissingParameterError, ShapeError
from paramsym.symmetry.absorption import _Shifts
from paramsym.symmetry.base import Region


def null_basis(a: Tensor) -> Tensor:
    """An (n, n − r) basis of the null space of a full-row-rank (r × n) matrix ``a`` (module
    docstring), differentiable in ``a``; raises where ``a`` is rank deficient."""
    rows, n = a.shape
    if rows == 0:
        return torch.eye(n, dtype=a.dtype, device=a.device)
    with torch.no_grad():
        permutation, _, upper = torch.linalg.lu(a.detach().T)  # aᵀ = P L U
        order = permutation.argmax(dim=0)  # row i of Pᵀaᵀ is row order[i] of aᵀ
        pivots, free = order[:rows], order[rows:]
        smallest = float(upper.diagonal().abs().min())
    if smallest <= torch.finfo(a.dtype).eps * max(float(a.detach().abs().max()), 1e-300) * n:
        raise InvalidArgumentError(
            f"null_basis: the {rows} × {n} matrix is rank deficient, so its null space is wider "
            "than the symmetry's dimension"
        )
    solved = torch.linalg.solve(a[:, pivots], a[:, free])  # (r, n − r)
    basis = a.new_zeros(n, n - rows)
    basis = basis.index_put((pivots,), -solved)
    return basis.index_put((free,), torch.eye(n - rows, dtype=a.dtype, device=a.device))


def _matrix(params: Mapping[str, Tensor], name: str, owner: str) -> Tensor:
    if name not in params:
        raise MissingParameterError(f"{owner} reads parameter '{name}', which is not in params")
    t = params[name]
    if t.ndim != 2:
        raise ShapeError(f"{owner}: '{name}' has shape {tuple(t.shape)}, expected a matrix")
    return t


class UnreadTranslation(_Shifts):
    """``(W, c) ↦ (W + K M, c + K m)``: a writer's rows moved along the null space K of every
    weight reading its output (module docstring).

    Args:
        weight: the writer's weight ``(n, in)`` (``nn.Linear``: output features on axis 0).
        bias: its bias ``(n,)``, or ``None``.
        readers: the weights ``(out_r, n)`` of the linear maps that read its output (through
            adds and layout ops), stacked to r < n rows.
        width, inputs, rows: n, in and r.
        site: label used in the name.

    Elements: vectors of ``(n − r)·(in + 1)`` entries (``(n − r)·in`` without bias), the matrix
    ``[M | m]`` row by row.
    """

    def __init__(
        self,
        weight: str,
        bias: str | None,
        readers: Sequence[str],
        *,
        width: int,
        inputs: int,
        rows: int,
        site: str,
    ) -> None:
        if not readers or rows >= width:
            raise InvalidArgumentError(
                f"unread[{site}]: the readers' {rows} rows leave no direction of {width} unread"
            )
        columns = inputs + (bias is not None)
        dim = (width - rows) * columns
        super().__init__(name=f"unread[{site}]", group=f"R^{dim}", dim=dim, linear=False)
        self.translation = False
        self.weight, self.bias, self.readers = weight, bias, tuple(readers)
        self.width, self.inputs, self.rows, self.columns = width, inputs, rows, columns

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return (self.weight,) if self.bias is None else (self.weight, self.bias)

    @property
    def reads(self) -> tuple[str, ...]:
        return self.readers

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions: set[Region] = {(self.weight, 0, 0, None), (self.weight, 1, 0, None)}
        if self.bias is not None:
            regions.add((self.bias, 0, 0, None))
        return frozenset(regions)

    def _changes(self, params: Mapping[str, Tensor], v: Tensor) -> dict[str, Tensor]:
        weight = _matrix(params, self.weight, self.name)
        stacked = torch.cat([_matrix(params, r, self.name) for r in self.readers])
        if weight.shape != (self.width, self.inputs) or stacked.shape != (self.rows, self.width):
            raise ShapeError(
                f"{self.name}: expected a writer ({self.width}, {self.inputs}) and readers "
                f"of {self.width} inputs stacked to {self.rows} rows, got {tuple(weight.shape)} "
                f"and {tuple(stacked.shape)}"
            )
        block = null_basis(stacked) @ v.to(weight.dtype).reshape(
            self.width - self.rows, self.columns
        )
        changes = {self.weight: block[:, : self.inputs]}
        if self.bias is not None:
            changes[self.bias] = block[:, self.inputs]
        return changes
