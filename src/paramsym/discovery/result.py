"""What exact discovery returns, and the rule that decides a null-space dimension.

The dimension of the symmetry algebra is the number of singular values of the constraint
matrix that are zero. In floating point "zero" means below a threshold, so the decision is
reported with the numbers behind it (:func:`decide`):

* ``rtol``: a singular value σ ≤ rtol · σ_max counts as zero (default √eps: 1.5e-8 in float64;
  exact symmetries give ≈ 1e-13, sampled constraints of a non-symmetry ≳ 1e-4);
* ``min_gap``: the smallest non-zero one must exceed ``min_gap · rtol · σ_max``; a value in the
  band (rtol, min_gap · rtol] · σ_max makes the dimension *ambiguous*;
* *stability* (notes 001c §10): the dimension must not change when the samples of θ are doubled,
  else it is *unstable*: a clean gap with too few samples gives a wrong (too large) dimension.

A result whose dimension is not decided has ``determined=False`` and ``dim=None``; the
estimate, the singular values and the dimensions at each sample count are still reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from paramsym.core.batches import Inputs
from paramsym.core.params import Params

if TYPE_CHECKING:
    from paramsym.discovery.ansatz import Ansatz

Status = Literal["determined", "ambiguous", "unstable"]


@dataclass(frozen=True)
class Decision:
    """The null-space dimension read off relative singular values (descending, σ_max = 1)."""

    dim: int
    gap: float
    smallest_nonzero: float | None
    largest_zero: float | None
    ambiguous: bool


def decide(relative: Tensor, rtol: float, min_gap: float) -> Decision:
    """Count the singular values ≤ ``rtol`` (``relative`` = σ / σ_max, any order).

    ``gap`` is σ_{K−d} / σ_{K−d+1}, the smallest non-zero over the largest zero one; with no
    zero value it is the smallest value over ``rtol`` (how far it clears the threshold), and
    ``inf`` when every value is zero.
    """
    values = relative.detach().double().cpu()
    zero = values <= rtol
    dim = int(zero.sum())
    largest_zero = float(values[zero].max()) if dim else None
    nonzero = values[~zero]
    smallest = float(nonzero.min()) if nonzero.numel() else None
    if smallest is None:
        gap = math.inf
    elif largest_zero is None:
        gap = smallest / rtol
    else:
        gap = smallest / largest_zero if largest_zero > 0 else math.inf
    ambiguous = smallest is not None and smallest <= rtol * min_gap
    return Decision(dim, gap, smallest, largest_zero, ambiguous)


class DiscoveredGenerator:
    """One generator A = Σ_j c_j B_j of the discovered algebra.

    ``tangent_field(params)`` is the infinitesimal action A θ at any θ, as a params dict;
    ``matrix`` the dense P × P matrix (models with P ≤ 4096); ``blocks`` its named pieces
    (e.g. the M and N of each layer pair).
    """

    def __init__(self, ansatz: Ansatz, coefficients: Tensor, index: int) -> None:
        self._ansatz = ansatz
        self._coefficients = coefficients  # dense (K,), or sparse for the unit-wise solver
        self.index = index

    @property
    def coefficients(self) -> Tensor:
        """The coefficients c (K,) of A = Σ_j c_j B_j in the ansatz's basis (dense)."""
        c = self._coefficients
        return c.to_dense() if c.is_sparse else c

    def tangent_field(self, params: Mapping[str, Tensor]) -> Params:
        """A θ at ``params`` (a dict with the model's parameter names), as a params dict."""
        theta = self._ansatz.flatten(params)
        c = self.coefficients.to(dtype=theta.dtype, device=theta.device)
        return self._ansatz.unflatten(self._ansatz.field(c, theta))

    @property
    def matrix(self) -> Tensor:
        """The generator as a (P, P) matrix acting on the flattened parameters."""
        return self._ansatz.matrix(self.coefficients)

    @property
    def blocks(self) -> dict[str, Tensor]:
        return self._ansatz.blocks(self.coefficients)

    def __repr__(self) -> str:
        return f"DiscoveredGenerator({self.index}, ansatz={self._ansatz.kind})"


def _float(value: float | None) -> float | str | None:
    if value is None:
        return None
    return value if math.isfinite(value) else str(value)


@dataclass
class DiscoveryResult:
    """The symmetry algebra found by :func:`~paramsym.discovery.discover_symmetries`.

    Attributes:
        dim: dimension of the algebra, or ``None`` when it is not determined.
        determined: whether the dimension is decided (clean gap and stable under doubling).
        status: ``"determined"``, ``"ambiguous"`` (a singular value in the undecided band) or
            ``"unstable"`` (doubling the samples changed the dimension).
        reason: the decision in words, with the numbers.
        dim_estimate: the count of zero singular values at the largest sample count (what
            ``generators`` hold even when undetermined).
        generators: an orthonormal basis (in coefficient space) of the null space.
        coefficients: the same as a (K, d) tensor (sparse for the unit-wise solver).
        singular_values: the constraint matrix's singular values relative to the largest,
            descending, shape (K_eff,) (unit-wise: the union over units).
        gap: σ_{K−d} / σ_{K−d+1} (see :func:`decide`).
        rtol, min_gap: the decision thresholds used.
        samples: number of θ draws in the final system; ``dims_by_samples`` maps each sample
            count tried to its dimension (the first half and the whole of each system).
        rank_per_sample: independent rows one θ contributes (measured on the first draw).
        rows: rows of the final system (after per-sample compression).
        unknowns: K minus the ansatz's redundant directions.
        ansatz, solver: descriptions of what was solved and how.
        data_dependent: whether the batch was fixed (Def. 1.3.4).
        gradient_evaluations: forward-backward passes used (one per batch of examples).
        seconds: wall time.
        notes: caveats.
    """

    dim: int | None
    determined: bool
    status: Status
    reason: str
    dim_estimate: int
    generators: list[DiscoveredGenerator]
    coefficients: Tensor
    singular_values: Tensor
    gap: float
    rtol: float
    min_gap: float
    samples: int
    dims_by_samples: dict[int, int]
    rank_per_sample: int
    rows: int
    unknowns: int
    ansatz: str
    solver: str
    data_dependent: bool
    gradient_evaluations: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    ansatz_object: Ansatz | None = field(default=None, repr=False)
    points: list[Params] = field(default_factory=list, repr=False)
    """A few of the sampled θ (for :func:`~paramsym.discovery.compare_to_catalogue`)."""
    batch: tuple[Inputs, Tensor] | None = field(default=None, repr=False)
    """The fixed batch ``(x, y)`` of a data-dependent discovery (x a tensor or named tensors)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers for JSON: the singular values in full up to 2000 of them, otherwise
        the 50 on either side of the cut."""
        values = [float(v) for v in self.singular_values]
        cut = len(values) - self.dim_estimate
        out: dict[str, Any] = {
            "dim": self.dim,
            "determined": self.determined,
            "status": self.status,
            "reason": self.reason,
            "dim_estimate": self.dim_estimate,
            "gap": _float(self.gap),
            "rtol": self.rtol,
            "min_gap": self.min_gap,
            "samples": self.samples,
            "dims_by_samples": {str(k): v for k, v in self.dims_by_samples.items()},
            "rank_per_sample": self.rank_per_sample,
            "rows": self.rows,
            "unknowns": self.unknowns,
            "ansatz": self.ansatz,
            "solver": self.solver,
            "data_dependent": self.data_dependent,
            "gradient_evaluations": self.gradient_evaluations,
            "seconds": self.seconds,
            "notes": list(self.notes),
        }
        if len(values) <= 2000:
            out["singular_values"] = values
        else:
            out["singular_values_near_cut"] = values[max(0, cut - 50) : cut + 50]
            out["singular_values_cut_index"] = min(cut, 50)
        return out

    def __repr__(self) -> str:
        dim = self.dim if self.determined else f"undetermined ({self.status})"
        return (
            f"DiscoveryResult(dim={dim}, gap={self.gap:.3g}, samples={self.samples}, "
            f"ansatz={self.ansatz.split(' ')[0]}, solver={self.solver})"
        )


def relative(values: Tensor, floor: float = 0.0) -> Tensor:
    """Singular values divided by the largest (or by ``floor`` when that is larger), sorted
    descending. The dense solver's rows have entries ≤ 1 for unit basis elements, so it uses
    ``floor=1``: a system whose every value is rounding (every basis element a symmetry) is
    then all zeros rather than scaled up to 1."""
    values = values.detach().double().flatten()
    if values.numel() == 0:
        return values
    top = max(float(values.max()), floor)
    scaled = values / top if top > 0 else values
    return torch.sort(scaled, descending=True).values
