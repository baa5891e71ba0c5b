"""The layer-pair ansatz of any traceable model, read off the detector's traced graph.

:class:`~paramsym.discovery.ansatz.LayerPairAnsatz` needs an MLP: a chain of ``nn.Linear``
layers. Real models (a CNN with BatchNorm, a ResNet block with a custom ``forward``) have
convolutions, normalisation layers, flattening and residual adds. The symmetry detector
(:func:`paramsym.symmetry.graph.analyse`) traces the model and records, for every **feature
space** (the output channels of a convolution, the hidden units of a linear layer, a residual
stream), which parameter axes carry its features (:class:`~paramsym.symmetry.graph.facts.Attach`):
the rows of the weight and the bias that produce them, the columns (input channels) of every
weight that reads them, a norm layer's weight and bias, and after a flatten (C, H, W) → C·H·W
the columns of the linear layer, each feature repeated H·W times.

:class:`ChannelAnsatz` gives each (module, feature space) pair an h × h block M that multiplies
all of that module's parameter axes on the space (the rows of W and b together, as
``LayerPairAnsatz``'s left block; the columns of the next weight, as its right block; a conv
weight's input channels with each kernel position alike, ``M ⊗ I``). Blocks of different
modules on the same space are independent unknowns, so the constraint itself decides how they
must combine: N = −M between two linear maps (GL), M = −N diagonal across a ReLU (rescaling),
M acting on a BatchNorm's (γ, β) against the columns of the next convolution. On an MLP the
blocks are those of ``LayerPairAnsatz`` (with both edge blocks).

Left out, and said so in :meth:`ChannelAnsatz.describe`: features split into attention heads
(their axes hold one head at a time); use the full ansatz or a basis for attention weights.
Parameters that no feature space reaches get no block (they can still appear in a symmetry
through the blocks of others only if they do not move, which is what the ansatz can express).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.discovery.ansatz import Ansatz
from paramsym.errors import InvalidArgumentError


@dataclass(frozen=True)
class AxisSlice:
    """Features of a block along one parameter axis: ``width`` features from ``offset``, each
    repeated ``repeat`` times contiguously (a flatten of (C, H, W) gives repeat = H·W)."""

    name: str
    axis: int
    offset: int
    width: int
    repeat: int = 1


@dataclass(frozen=True)
class ChannelBlock:
    """One unknown h × h matrix M at ``start`` (row-major) in the coefficient vector, acting as
    ``M ⊗ I`` along every slice in ``slices``."""

    name: str
    module: str
    space: int
    size: int
    start: int
    slices: tuple[AxisSlice, ...]

    @property
    def stop(self) -> int:
        return self.start + self.size * self.size


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else ""


class ChannelAnsatz(Ansatz):
    """Left multiplications of every parameter axis on a feature space, one block per
    (module, space), found on the traced graph (module docstring).

    Args:
        model: any model :func:`paramsym.symmetries` can trace.
        names: the trainable parameters (flattening order).
        example_input: an input batch to trace the model with.
        max_width: feature spaces wider than this get no block (h² unknowns each); ``None``
            keeps every space.
    """

    kind = "channels"

    def __init__(
        self,
        model: nn.Module,
        names: Sequence[str],
        example_input: Any,
        *,
        max_width: int | None = None,
    ) -> None:
        from paramsym.symmetry.graph import TraceError, analyse

        params = dict(model.named_parameters())
        super().__init__(names, [params[n].shape for n in names])
        try:
            walk = analyse(model, example_input).walk
            assert walk is not None  # a fresh analysis has its walk
            facts = walk.facts
        except TraceError as error:
            raise InvalidArgumentError(
                f"channels ansatz: {type(model).__name__} could not be traced ({error}); use "
                "ansatz='full' for a tiny model or a basis"
            ) from error
        grouped: dict[tuple[str, int, int, int], list[AxisSlice]] = {}
        self.left_out: list[str] = []
        for attach in facts.attaches:
            if attach.name not in self.offsets:
                continue  # a buffer or a frozen parameter
            member = attach.member
            if member.heads > 1:
                self.left_out.append(f"{attach.name} (attention heads)")
                continue
            if max_width is not None and member.width > max_width:
                self.left_out.append(f"{attach.name} axis {attach.axis} (width {member.width})")
                continue
            key = (_module_of(attach.name), member.space, member.start, member.stop)
            piece = AxisSlice(attach.name, attach.axis, attach.offset, member.width, attach.block)
            if piece not in grouped.setdefault(key, []):
                grouped[key].append(piece)
        if not grouped:
            raise InvalidArgumentError(
                f"channels ansatz: the traced graph of {type(model).__name__} has no feature "
                "space that a trainable parameter axis carries; use ansatz='full' or a basis"
            )
        self.blocks_: list[ChannelBlock] = []
        self._indices: list[list[Tensor]] = []
        start = 0
        for (module, space, first, stop), slices in grouped.items():
            h = stop - first
            label = f"{module or '<root>'}@space{space}" + (
                f"[{first}:{stop}]" if (first, stop) != (0, facts.spaces[space].width) else ""
            )
            block = ChannelBlock(label, module, space, h, start, tuple(slices))
            self.blocks_.append(block)
            self._indices.append([self._slice_indices(s) for s in slices])
            start += h * h
        self.size = start

    def _slice_indices(self, piece: AxisSlice) -> Tensor:
        """Positions in θ of the slice's entries, (h, n): row i holds feature i's entries."""
        start, shape = self.offsets[piece.name]
        positions = torch.arange(shape.numel()).reshape(shape).movedim(piece.axis, 0)
        chosen = positions[piece.offset : piece.offset + piece.width * piece.repeat]
        if chosen.shape[0] != piece.width * piece.repeat:
            raise InvalidArgumentError(
                f"channels ansatz: {piece.name} axis {piece.axis} has {positions.shape[0]} "
                f"entries, the traced graph places {piece.width}×{piece.repeat} features at "
                f"{piece.offset}"
            )
        return chosen.reshape(piece.width, -1) + start

    @property
    def channel_blocks(self) -> tuple[ChannelBlock, ...]:
        return tuple(self.blocks_)

    def _block(self, coefficients: Tensor, block: ChannelBlock) -> Tensor:
        piece = coefficients[block.start : block.stop]
        return piece.reshape(block.size, block.size, *piece.shape[1:])

    def rows(self, theta: Tensor, grads: Tensor) -> Tensor:
        # ⟨g, (M ⊗ I) T⟩ = Σ_ij M_ij Σ_k g[i, k] T[j, k]
        out = []
        for indices in self._indices:
            c = sum(torch.einsum("bik,jk->bij", grads[:, idx], theta[idx]) for idx in indices)
            assert isinstance(c, Tensor)
            out.append(c.reshape(grads.shape[0], -1))
        return torch.cat(out, dim=1)

    def field(self, coefficients: Tensor, theta: Tensor) -> Tensor:
        single = coefficients.ndim == 1
        c = coefficients[:, None] if single else coefficients
        out = torch.zeros(self.numel, c.shape[1], dtype=theta.dtype, device=theta.device)
        for block, indices in zip(self.blocks_, self._indices, strict=True):
            m = self._block(c, block).to(theta.dtype)  # (h, h, d)
            for idx in indices:
                rate = torch.einsum("ijd,jk->ikd", m, theta[idx])
                out.index_add_(0, idx.reshape(-1), rate.reshape(-1, c.shape[1]))
        return out[:, 0] if single else out

    def matrix(self, coefficients: Tensor) -> Tensor:
        self._check_matrix_size()
        a = torch.zeros(self.numel, self.numel, dtype=coefficients.dtype)
        for block, indices in zip(self.blocks_, self._indices, strict=True):
            m = self._block(coefficients, block)
            h = block.size
            for idx in indices:
                n = idx.shape[1]
                rows = idx[:, None, :].expand(h, h, n)
                cols = idx[None, :, :].expand(h, h, n)
                values = m[:, :, None].expand(h, h, n)
                a.index_put_((rows.reshape(-1), cols.reshape(-1)), values.reshape(-1), True)
        return a

    def redundancy(self) -> Tensor:
        """Combinations of the blocks' identities that cancel: block b's identity is the
        indicator of its entries, so the redundant combinations are the null space of
        SᵀS, S[p, b] = 1 where block b covers entry p."""
        count = len(self.blocks_)
        overlap = torch.zeros(count, count, dtype=torch.float64)
        by_name: dict[str, list[tuple[int, Tensor]]] = {}
        for b, (block, indices) in enumerate(zip(self.blocks_, self._indices, strict=True)):
            for piece, idx in zip(block.slices, indices, strict=True):
                overlap[b, b] += idx.numel()
                by_name.setdefault(piece.name, []).append((b, idx.reshape(-1)))
        for pieces in by_name.values():  # only blocks on a common tensor can overlap
            for (b, first), (c, second) in itertools.combinations(pieces, 2):
                shared = float(torch.isin(first, second).sum())
                overlap[b, c] += shared
                overlap[c, b] += shared
        values, vectors = torch.linalg.eigh(overlap)
        null = vectors[:, values <= 1e-9 * float(values.max())]
        if null.shape[1] == 0:
            return super().redundancy()
        directions = torch.zeros(null.shape[1], self.size, dtype=torch.float64)
        for b, block in enumerate(self.blocks_):
            diagonal = torch.arange(block.size) * (block.size + 1) + block.start
            directions[:, diagonal] = null[b][:, None]
        return torch.linalg.qr(directions.T).Q.T.contiguous()

    def bracket(self, c1: Tensor, c2: Tensor) -> Tensor | None:
        """Blocks on disjoint entries commute and each is a left multiplication, so the bracket
        is blockwise [M₁, M₂]; ``None`` when two blocks overlap on the same axis."""
        seen: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for block in self.blocks_:
            for piece in block.slices:
                span = (piece.offset, piece.offset + piece.width * piece.repeat)
                for other in seen.get((piece.name, piece.axis), []):
                    if span[0] < other[1] and other[0] < span[1]:
                        return None
                seen.setdefault((piece.name, piece.axis), []).append(span)
        out = torch.zeros_like(c1)
        for block in self.blocks_:
            m1, m2 = self._block(c1, block), self._block(c2, block)
            out[block.start : block.stop] = (m1 @ m2 - m2 @ m1).reshape(-1)
        return out

    def blocks(self, coefficients: Tensor) -> dict[str, Tensor]:
        return {block.name: self._block(coefficients, block) for block in self.blocks_}

    def describe(self) -> str:
        text = (
            f"channels ({self.size} unknowns in {len(self.blocks_)} blocks on the traced "
            f"graph's feature spaces"
        )
        if self.left_out:
            text += f"; left out: {', '.join(self.left_out[:4])}"
            text += "…" if len(self.left_out) > 4 else ""
        return text + ")"
