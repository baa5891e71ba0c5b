"""Rotations of a stream that only LayerNorms read, undone in the linear maps reading the norms.

A LayerNorm computes ``γ ⊙ x̂ + β`` with ``x̂ = (z − μ1)/σ``. An orthogonal Q that fixes the
all-ones direction (Q1 = 1, so Qᵀ1 = 1) keeps every input's mean and spread, so
``x̂(Qz) = Q x̂(z)`` exactly (eps included). Where every writer of a stream z can rotate its
output (embedding tables ``E ↦ E Qᵀ``, linear maps ``(W, b) ↦ (QW, Qb)``, parameters added as they
are) and every reader of the norms' outputs is a linear map, the norm's output becomes
``γ ⊙ Q x̂ + β' = M (γ ⊙ x̂ + β)`` with ``M = diag(γ) Q diag(γ)⁻¹`` and ``β' = M β``, and each
reader takes it back, ``W_r ↦ W_r M⁻¹``. ELECTRA's and ALBERT's embeddings (summed, normalised,
projected to the hidden size) have this group, O(e − 1) for embedding width e; where a norm's
output reaches anything else (a residual, the model's output) the rotation would show.

The group is the orthogonal group of 1^⊥: elements are d × d orthogonal matrices with Q1 = 1,
the algebra is skew-symmetric S = U K Uᵀ with K ∈ so(d − 1) (basis ``E_kl − E_lk``, k < l,
row-major) and U a fixed orthonormal basis of 1^⊥ (the Q factor of the centred identity's
first d − 1 columns). The action reads the norms' scales γ (:attr:`~Symmetry.reads`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import InvalidArgumentError, InvalidGroupElementError, ShapeError
from paramsym.symmetry.absorption import Reader, _get
from paramsym.symmetry.base import GroupElement, Region, Symmetry


@dataclass(frozen=True)
class NormSite:
    """A LayerNorm reading the stream: its scale γ and shift β (either ``None``) and the linear
    maps reading its output (weights' ``axis`` their input axis)."""

    weight: str | None
    bias: str | None
    readers: tuple[Reader, ...]


def complement_basis(width: int, dtype: torch.dtype, device: torch.device | None = None) -> Tensor:
    """U, ``(d, d − 1)``: an orthonormal basis of the vectors orthogonal to 1."""
    centred = torch.eye(width, dtype=torch.float64) - 1.0 / width
    basis = torch.linalg.qr(centred[:, :-1]).Q
    return basis.to(dtype=dtype, device=device)


class NormRotation(Symmetry):
    """``z ↦ Q z`` on a stream only LayerNorms read, with Q1 = 1, undone in the norms' readers
    (module docstring).

    Args:
        writers: (parameter, axis) of every writer: the axis its stream features lie on (a
            table's columns, a linear map's output axis, a bias, a parameter's last axis).
        norms: the LayerNorms reading the stream.
        width: d, the stream's width.
        site: label used in the name.
    """

    def __init__(
        self,
        writers: Sequence[tuple[str, int]],
        norms: Sequence[NormSite],
        *,
        width: int,
        site: str,
    ) -> None:
        if width < 3 or not writers or not norms:
            raise InvalidArgumentError(
                f"norm_rotation[{site}]: needs width ≥ 3 (O(d − 1) with d − 1 ≥ 2), writers and "
                "norms"
            )
        dim = (width - 1) * (width - 2) // 2
        super().__init__(
            name=f"norm_rotation[{site}]",
            group=f"O({width - 1})",
            dim=dim,
            linear=False,
            affine=False,
        )
        self.writers = tuple((str(n), int(a)) for n, a in writers)
        self.norms = tuple(norms)
        self.width = int(width)

    @property
    def parameter_names(self) -> tuple[str, ...]:
        names = [n for n, _ in self.writers]
        for norm in self.norms:
            names += [*([norm.bias] if norm.bias else []), *(r.weight for r in norm.readers)]
        return tuple(dict.fromkeys(names))

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.weight for n in self.norms if n.weight is not None))

    @property
    def touched_regions(self) -> frozenset[Region]:
        regions = {(n, a, 0, None) for n, a in self.writers}
        for norm in self.norms:
            if norm.bias:
                regions.add((norm.bias, 0, 0, None))
            regions |= {(r.weight, r.axis, 0, None) for r in norm.readers}
        return frozenset(regions)

    # -- group ------------------------------------------------------------------------------
    def _identity(self, dtype: torch.dtype) -> Tensor:
        return torch.eye(self.width, dtype=dtype)

    def _sample(
        self, scale: float, generator: torch.Generator | None, dtype: torch.dtype
    ) -> Tensor:
        return self.exp(scale * torch.randn(self.dim, generator=generator, dtype=dtype))

    def algebra(self, xi: Tensor) -> Tensor:
        """S = U K Uᵀ, ``(d, d)``, for coordinates ``xi`` of K ∈ so(d − 1)."""
        xi = self.check_xi(xi)
        size = self.width - 1
        rows, cols = torch.triu_indices(size, size, offset=1)
        skew = xi.new_zeros(size, size)
        skew = skew.index_put((rows, cols), xi).index_put((cols, rows), -xi)
        basis = complement_basis(self.width, xi.dtype, xi.device)
        return basis @ skew @ basis.T

    def exp(self, xi: Tensor) -> Tensor:
        return torch.linalg.matrix_exp(self.algebra(xi))

    def linear_element(self, xi: Tensor) -> Tensor:
        return torch.eye(self.width, dtype=xi.dtype, device=xi.device) + self.algebra(xi)

    def compose(self, g1: GroupElement, g2: GroupElement) -> Tensor:
        return self.check_element(g1) @ self.check_element(g2)

    def inverse(self, g: GroupElement) -> Tensor:
        return self.check_element(g).T

    def check_element(self, g: GroupElement) -> Tensor:
        q = self._element_tensor(g, (self.width, self.width), "a rotation")
        if not bool(torch.isfinite(q).all()):
            raise InvalidGroupElementError(f"{self.name}: the rotation has NaN or inf entries")
        eye = torch.eye(self.width, dtype=q.dtype, device=q.device)
        ones = torch.ones(self.width, dtype=q.dtype, device=q.device)
        tol = self.width * torch.finfo(q.dtype).eps ** 0.5
        q_ = q.detach()
        error = max(float((q_.T @ q_ - eye).abs().max()), float((q_ @ ones - ones).abs().max()))
        if error > tol:
            raise InvalidGroupElementError(
                f"{self.name}: the element is not an orthogonal matrix fixing 1 (error "
                f"{error:.2e} > {tol:.1e}); LayerNorm commutes with those only"
            )
        return q

    # -- action -----------------------------------------------------------------------------
    def _changes(
        self, params: Mapping[str, Tensor], forward: Tensor, backward: Tensor, tangent: bool
    ) -> dict[str, Tensor]:
        """What the action adds to each parameter: writers multiplied by ``forward`` along
        their axis, β by ``diag(γ) forward diag(γ)⁻¹``, readers by ``diag(γ) backward diag(γ)⁻¹``
        on their input axis (``forward`` = Q and ``backward`` = Qᵀ for an element; S and −S
        for a tangent, where the changes are the products themselves)."""
        changes: dict[str, Tensor] = {}
        for name, axis in self.writers:
            t = _get(params, name, self.name)
            if t.ndim <= axis or t.shape[axis] != self.width:
                raise ShapeError(
                    f"{self.name}: parameter '{name}' has shape {tuple(t.shape)}, expected "
                    f"{self.width} stream features on axis {axis}"
                )
            m = forward.to(dtype=t.dtype, device=t.device)
            moved = torch.movedim(torch.tensordot(m, t, dims=([1], [axis])), 0, axis)
            changes[name] = moved if tangent else moved - t
        for norm in self.norms:
            first = norm.readers[0] if norm.readers else None
            ref = _get(params, norm.bias or (first.weight if first else self.writers[0][0]),
                       self.name)  # fmt: skip
            gamma = (
                _get(params, norm.weight, self.name)
                if norm.weight is not None
                else torch.ones(self.width, dtype=ref.dtype, device=ref.device)
            )
            f = forward.to(dtype=gamma.dtype, device=gamma.device)
            b = backward.to(dtype=gamma.dtype, device=gamma.device)
            into = gamma[:, None] * f / gamma[None, :]
            back = gamma[:, None] * b / gamma[None, :]
            if norm.bias is not None:
                beta = _get(params, norm.bias, self.name)
                moved = into @ beta
                changes[norm.bias] = moved if tangent else moved - beta
            for reader in norm.readers:
                weight = _get(params, reader.weight, self.name)
                if weight.ndim != 2 or weight.shape[reader.axis] != self.width:
                    raise ShapeError(
                        f"{self.name}: weight '{reader.weight}' has shape "
                        f"{tuple(weight.shape)}, expected {self.width} inputs on axis "
                        f"{reader.axis}"
                    )
                moved = weight @ back if reader.axis == 1 else back.T @ weight
                change = moved if tangent else moved - weight
                before = changes.get(reader.weight)
                changes[reader.weight] = change if before is None else before + change
        return changes

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        q = self.check_element(g)
        names = (*self.parameter_names, *self.reads)
        check_finite(((n, params[n]) for n in names if n in params), self.name)
        changes = self._changes(params, q, q.T, tangent=False)
        return {k: t + changes[k] if k in changes else t for k, t in params.items()}

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        s = self.algebra(xi)
        changes = self._changes(params, s, -s, tangent=True)
        return {k: changes[k] if k in changes else torch.zeros_like(t) for k, t in params.items()}
