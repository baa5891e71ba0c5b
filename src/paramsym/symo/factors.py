"""Invariant matrices held by their factors: project, expand, multiply, and apply matrix
functions without forming the ``P × P`` matrix (seed 002 §3.4, Apps. K–L).

A :class:`Factors` is one square matrix M_τ per block type τ of a
:class:`~paramsym.symo.structure.CurvatureStructure`; it stands for the full matrix
Σ = Σ_τ Q_τ (M_τ ⊗ I) Q_τᵀ. Everything the paper does with the surrogate Λ happens block by
block here: f(Σ) has factors f(M_τ), products multiply factors, and Σ v is a few small matrix
products (the Kronecker form of Eq. 206). :meth:`Factors.surrogate` builds the paper's
surrogate itself (hidden widths 1 or 2, Eq. 202) and ``apply(..., method="surrogate")`` goes
through it literally — the tests check both routes against each other and against dense
matrices.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from paramsym.core.params import Params
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.symo.structure import CurvatureStructure

SpectralFunction = Callable[[Tensor], Tensor]
"""A function applied to eigenvalues (elementwise), e.g. ``torch.rsqrt``."""


@dataclass(frozen=True)
class InverseRootConfig:
    """How to take a (pseudo-)inverse power of a PSD matrix that may be singular.

    The estimated curvature is rank-deficient early in training (a single gradient gives
    rank ≤ d_1 per type, notes 002 §2.5); the paper does not say how it copes. The three
    choices, applied in this order to the eigenvalues λ of every factor matrix:

    1. ``damping`` ε: λ ← λ + ε, i.e. Σ + εI (the authors' code adds ε to Φ_1, Φ_L and φ,
       which is the same as Λ + εI; the paper's runs use ε = 0);
    2. ``eigenvalue_floor``: λ ← max(λ, floor);
    3. pseudo-inverse: for a negative ``power``, eigenvalues ``λ ≤ pinv_rcond · λ_max`` (λ_max over
       all blocks, i.e. over the whole surrogate) are treated as zero and get zero, not
       λ^power (the authors' ``pinv``). ``pinv_rcond=None`` means ``n · eps(dtype)`` with n the
       surrogate size.

    Attributes:
        power: the exponent, −1/2 for SymO (Eq. 4).
    """

    power: float = -0.5
    damping: float = 0.0
    eigenvalue_floor: float = 0.0
    pinv_rcond: float | None = None

    def __post_init__(self) -> None:
        if self.damping < 0 or self.eigenvalue_floor < 0:
            raise InvalidArgumentError(
                f"InverseRootConfig: damping and eigenvalue_floor must be >= 0, got "
                f"{self.damping} and {self.eigenvalue_floor}"
            )
        if self.pinv_rcond is not None and not 0 <= self.pinv_rcond < 1:
            raise InvalidArgumentError(
                f"InverseRootConfig: pinv_rcond must be in [0, 1), got {self.pinv_rcond}"
            )


class Factors:
    """An invariant matrix Σ = Σ_τ Q_τ (M_τ ⊗ I) Q_τᵀ stored as its factor matrices M_τ.

    Args:
        structure: the network's structure.
        blocks: ``{type key: (n_τ, n_τ) tensor}`` for every type of ``structure``.

    >>> import torch
    >>> from paramsym.symo import CurvatureStructure
    >>> s = CurvatureStructure.from_widths([3, 4, 2], "signed_permutation", bias=False)
    >>> f = Factors.random(s, torch.Generator().manual_seed(0))
    >>> dense = f.to_dense()                       # (20, 20), never needed in practice
    >>> bool(torch.allclose(Factors.from_dense(s, dense).blocks["def1"], f.blocks["def1"]))
    True
    >>> f.surrogate().shape                        # Λ of Eq. 202: (d_0 + d_2)²
    torch.Size([5, 5])
    """

    def __init__(self, structure: CurvatureStructure, blocks: Mapping[str, Tensor]) -> None:
        missing = [k for k in structure.keys if k not in blocks]
        extra = [k for k in blocks if k not in structure.keys]
        if missing or extra:
            raise InvalidArgumentError(
                f"Factors: blocks must have exactly the structure's types {list(structure.keys)}"
                f" (missing {missing}, unknown {extra})"
            )
        for t in structure.types:
            b = blocks[t.key]
            if tuple(b.shape) != (t.multiplicity, t.multiplicity):
                raise ShapeError(
                    f"Factors: block {t.key!r} must have shape ({t.multiplicity}, "
                    f"{t.multiplicity}), got {tuple(b.shape)}"
                )
        self.structure = structure
        self.blocks: dict[str, Tensor] = {k: blocks[k] for k in structure.keys}

    # -- construction ----------------------------------------------------------------------
    @classmethod
    def zeros(cls, structure: CurvatureStructure, dtype: torch.dtype = torch.float64) -> Factors:
        """The factors of the zero matrix."""
        return cls(
            structure,
            {
                t.key: torch.zeros(t.multiplicity, t.multiplicity, dtype=dtype)
                for t in structure.types
            },
        )

    @classmethod
    def identity(cls, structure: CurvatureStructure, dtype: torch.dtype = torch.float64) -> Factors:
        """The factors of the identity matrix I_P."""
        return cls(
            structure, {t.key: torch.eye(t.multiplicity, dtype=dtype) for t in structure.types}
        )

    @classmethod
    def random(
        cls,
        structure: CurvatureStructure,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
        *,
        symmetric: bool = True,
    ) -> Factors:
        """Random factors: positive definite ``A Aᵀ / n + 0.1 I`` per block (a random draw of
        "the theory's structure", Fig. 2C), or Gaussian blocks if ``symmetric=False``."""
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        blocks = {}
        for t in structure.types:
            n = t.multiplicity
            a = torch.randn(n, n, generator=gen, dtype=torch.float64)
            blocks[t.key] = (
                (a @ a.T / n + 0.1 * torch.eye(n, dtype=torch.float64)) if symmetric else a
            )
        return cls(structure, {k: v.to(dtype) for k, v in blocks.items()})

    @classmethod
    def from_dense(cls, structure: CurvatureStructure, matrix: Tensor) -> Factors:
        """The Reynolds projection of a dense ``P × P`` matrix (the group average
        (1/|G|) Σ_G G X Gᵀ, which is also the least-squares fit of Eqs. 186–188):
        M_τ = (1/dim τ) Σ_k (Q_τᵀ X Q_τ)[(a,k),(b,k)], a partial trace over each copy."""
        p = structure.num_params
        if tuple(matrix.shape) != (p, p):
            raise ShapeError(
                f"Factors.from_dense: expected a ({p}, {p}) matrix, got {tuple(matrix.shape)}"
            )
        columns = structure.coordinates(structure.unflatten(matrix.T))  # (P, n, D) per type
        blocks = {}
        for t in structure.types:
            left = columns[t.key].permute(1, 2, 0)  # (n, D, P): Q_τᵀ X
            both = structure.coordinates(structure.unflatten(left), keys=[t.key])[t.key]
            # both[a, k, b, l] = (Q_τᵀ X Q_τ)[(a, k), (b, l)]
            blocks[t.key] = torch.einsum("akbk->ab", both) / t.dim
        return cls(structure, blocks)

    @classmethod
    def from_surrogate(cls, structure: CurvatureStructure, surrogate: Tensor) -> Factors:
        """Read the factors off a surrogate matrix (Eq. 204), the dense matrix at
        :attr:`~CurvatureStructure.surrogate_widths`."""
        small = structure.surrogate()
        return cls(structure, Factors.from_dense(small, surrogate).blocks)

    # -- dense forms -----------------------------------------------------------------------
    def to_dense(self, *, max_params: int = 10_000) -> Tensor:
        """The full ``P × P`` matrix (Theorems 3.1/3.2); refuses ``P > max_params``."""
        p = self.structure.num_params
        if p > max_params:
            raise InvalidArgumentError(
                f"Factors.to_dense: {p} parameters > max_params={max_params}; the full matrix "
                "has P² entries — use matvec, or raise max_params"
            )
        eye = torch.eye(p, dtype=self.dtype, device=self.device)
        return self.structure.flatten(self.matvec(self.structure.unflatten(eye))).T

    def surrogate(self) -> Tensor:
        """The surrogate Λ: the same factors at hidden widths 1 (O(d), B(d)) or 2 (S(d))
        (Eqs. 200–202). Its eigenvalues are those of the full matrix without repeats."""
        return Factors(self.structure.surrogate(), self.blocks).to_dense()

    # -- algebra ---------------------------------------------------------------------------
    @property
    def dtype(self) -> torch.dtype:
        """The blocks' dtype."""
        return next(iter(self.blocks.values())).dtype

    @property
    def device(self) -> torch.device:
        """The blocks' device."""
        return next(iter(self.blocks.values())).device

    def _same_structure(self, other: Factors, what: str) -> None:
        if not self.structure.same_factors(other.structure):
            raise InvalidArgumentError(f"Factors.{what}: the two factors have different structures")

    def matvec(self, v: Mapping[str, Tensor]) -> Params:
        """Σ v in Kronecker form (Eq. 206): ``Q_τ (M_τ ⊗ I) Q_τᵀ v`` for each type, never
        forming Σ. ``v`` is a params dict, optionally with leading batch dimensions (then
        each vector is multiplied)."""
        coords = self.structure.coordinates(v)
        return self.structure.assemble({k: self.blocks[k].to(c) @ c for k, c in coords.items()})

    def matmul(self, other: Factors) -> Factors:
        """The factors of the product Σ_self Σ_other (closure under products)."""
        self._same_structure(other, "matmul")
        return Factors(self.structure, {k: self.blocks[k] @ other.blocks[k] for k in self.blocks})

    def add(self, other: Factors, alpha: float = 1.0) -> Factors:
        """The factors of Σ_self + alpha Σ_other."""
        self._same_structure(other, "add")
        return Factors(
            self.structure, {k: self.blocks[k] + alpha * other.blocks[k] for k in self.blocks}
        )

    def scale(self, alpha: float | Tensor) -> Factors:
        """The factors of alpha Σ."""
        return Factors(self.structure, {k: alpha * b for k, b in self.blocks.items()})

    def transpose(self) -> Factors:
        """The factors of Σᵀ (each block transposed)."""
        return Factors(self.structure, {k: b.T for k, b in self.blocks.items()})

    def to(self, dtype: torch.dtype) -> Factors:
        """The same factors in another dtype."""
        return Factors(self.structure, {k: b.to(dtype) for k, b in self.blocks.items()})

    def is_symmetric(self, rtol: float | None = None) -> bool:
        """Whether every block equals its transpose to ``rtol`` (default 100·eps)."""
        tol = 100 * torch.finfo(self.dtype).eps if rtol is None else rtol
        return all(
            float((b - b.T).abs().max()) <= tol * max(float(b.abs().max()), 1e-300)
            for b in self.blocks.values()
            if b.numel()
        )

    # -- spectra and matrix functions ------------------------------------------------------
    def _check_symmetric(self, what: str) -> None:
        if not self.is_symmetric():
            raise InvalidArgumentError(
                f"Factors.{what}: the matrix is not symmetric; matrix functions need a "
                "symmetric matrix (a covariance, Hessian or one of their functions)"
            )

    def _eigh(self, what: str) -> dict[str, tuple[Tensor, Tensor]]:
        self._check_symmetric(what)
        return {k: torch.linalg.eigh((b + b.T) / 2) for k, b in self.blocks.items()}

    def eigvals(self) -> dict[str, tuple[Tensor, int]]:
        """``{key: (eigenvalues of M_τ, multiplicity dim τ in the full matrix)}``."""
        return {
            k: (vals, self.structure.type(k).dim) for k, (vals, _) in self._eigh("eigvals").items()
        }

    def spectrum(self) -> Tensor:
        """All P eigenvalues of the full matrix, with repeats, sorted ascending."""
        parts = [vals.repeat_interleave(dim) for vals, dim in self.eigvals().values()]
        return torch.sort(torch.cat(parts)).values

    def apply(self, fn: SpectralFunction, *, method: str = "blocks") -> Factors:
        """The factors of f(Σ) for a spectral function ``fn`` (applied to eigenvalues), e.g.
        ``torch.sqrt``. ``method="blocks"`` diagonalises each M_τ; ``"surrogate"`` follows
        App. L literally: build Λ (Eq. 202), f(Λ) by eigendecomposition, read the factors off
        it (Eq. 204). Both give the same factors (tested)."""
        if method == "blocks":
            out = {}
            for k, (vals, vecs) in self._eigh("apply").items():
                out[k] = (vecs * fn(vals)) @ vecs.T
            return Factors(self.structure, out)
        if method == "surrogate":
            self._check_symmetric("apply")
            lam = self.surrogate()
            vals, vecs = torch.linalg.eigh((lam + lam.T) / 2)
            return Factors.from_surrogate(self.structure, (vecs * fn(vals)) @ vecs.T)
        raise InvalidArgumentError(
            f"Factors.apply: method must be 'blocks' or 'surrogate', got {method!r}"
        )

    def inverse_root(self, config: InverseRootConfig | None = None) -> Factors:
        """The factors of Σ^power with damping, flooring and a pseudo-inverse cutoff as
        ``config`` says (default: Σ^{−1/2} with a pseudo-inverse, the authors' choice)."""
        config = config or InverseRootConfig()
        decomposition = self._eigh("inverse_root")
        powered = power_eigenvalues(
            {k: vals for k, (vals, _) in decomposition.items()},
            config,
            self.structure.surrogate_size,
        )
        return Factors(
            self.structure,
            {k: (vecs * powered[k]) @ vecs.T for k, (_, vecs) in decomposition.items()},
        )

    def sqrt(self) -> Factors:
        """Σ^{1/2} (negative eigenvalues clipped to zero)."""
        return self.apply(lambda v: v.clamp_min(0).sqrt())

    def inverse(self) -> Factors:
        """Σ^{−1} (pseudo-inverse for singular Σ, default cutoff)."""
        return self.inverse_root(InverseRootConfig(power=-1.0))

    def inv_sqrt(self) -> Factors:
        """Σ^{−1/2} (pseudo-inverse for singular Σ, default cutoff)."""
        return self.inverse_root(InverseRootConfig(power=-0.5))

    # -- reading factors -------------------------------------------------------------------
    def block(self, key: str, row: str | None = None, col: str | None = None) -> Tensor:
        """Block ``key``, or its sub-block between the copies of parameters ``row`` and
        ``col``. E.g. for a 2-layer odd net without bias, ``block("def1", "0.weight",
        "0.weight")`` is Φ_1, ``block("def1", "0.weight", "2.weight")`` is Ψ_1 and
        ``block("def1", "2.weight", "2.weight")`` is Φ_2 (Eqs. 37–39)."""
        t = self.structure.type(key)
        b = self.blocks[key]
        if row is None and col is None:
            return b
        r0, r1 = t.span(row) if row is not None else (0, t.multiplicity)
        c0, c1 = t.span(col) if col is not None else (0, t.multiplicity)
        return b[r0:r1, c0:c1]

    def flat(self) -> Tensor:
        """All factor entries in one vector (for correlations between estimates)."""
        return torch.cat([b.reshape(-1) for b in self.blocks.values()])

    def __repr__(self) -> str:
        sizes = {k: tuple(b.shape) for k, b in self.blocks.items()}
        return f"Factors({sizes}, dtype={self.dtype})"


def power_eigenvalues(
    eigenvalues: Mapping[str, Tensor], config: InverseRootConfig, size: int
) -> dict[str, Tensor]:
    """Apply :class:`InverseRootConfig` to the eigenvalues of every block (``size`` is the
    surrogate size, for the default cutoff)."""
    shifted = {
        k: (v + config.damping).clamp_min(config.eigenvalue_floor) for k, v in eigenvalues.items()
    }
    if config.power >= 0:
        return {k: v.clamp_min(0) ** config.power for k, v in shifted.items()}
    nonempty = [v.max() for v in shifted.values() if v.numel()]
    if not nonempty:
        return dict(shifted)
    top = torch.stack(nonempty).max().clamp_min(0)
    first = next(iter(shifted.values()))
    rcond = (
        config.pinv_rcond if config.pinv_rcond is not None else size * torch.finfo(first.dtype).eps
    )
    cutoff = rcond * top
    out = {}
    for k, v in shifted.items():
        keep = (v > cutoff) & (v > 0)
        out[k] = torch.where(
            keep, v.clamp_min(torch.finfo(v.dtype).tiny) ** config.power, torch.zeros_like(v)
        )
    return out
