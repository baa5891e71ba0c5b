"""Functional dimension: the rank of the parameter Jacobian on a batch (seed 004).

``J`` stacks, for each of the m samples and each of the O outputs, the gradient of that
output with respect to all P parameters: an ``(m·O) × P`` matrix (seed 004 treats O = 1; paramsym
stacks the outputs, which is the rank of the full NTK Gram matrix). Its rank is the batch
functional dimension (Grigsby et al. 2022) and equals rank(K) for K = J Jᵀ.

Precision (notes 004 §5, checked again here): seed 004 computes the rank of J in float32 with
``torch.linalg.matrix_rank``'s rule ``max(m·O, P) · eps · σ_max``; ``dtype=torch.float32``
reproduces that. The rank must come from J, or from the Gram matrix with a consistent
threshold. ``matrix_rank(K)`` in float32 with its default rule *undercounts* (17 where rank(J) is 23
on a (1,10,10,10,10|1) ReLU net and 60 points), and squaring the J tolerance does not rescue
the Gram path in float64 either: K's rounding noise is ~N·eps·λ_max, far above (tol)², so
noise is counted (42 instead of 24).
The Gram path (an N × N Gram matrix, N = min(m·O, P)) therefore uses the threshold
``max(tol², N·eps·λ_max)`` on eigenvalues, reports when that is coarser than the requested
tolerance, and marks the result approximate.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.batches import Inputs, as_inputs, batch_length, floats_to, one_sample_batch, take
from paramsym.core.model_checks import check_deterministic, require_module
from paramsym.core.params import check_finite, resolve_params, to_dtype
from paramsym.errors import InvalidArgumentError, ParamsymWarning
from paramsym.tangent_kernel.generic import jacobians_over_samples
from paramsym.tangent_kernel.kernel import DEFAULT_MEMORY_BUDGET, kernel_matrix, ntk
from paramsym.tangent_kernel.outputs import OutputSelector, check_output_selector, flat_outputs
from paramsym.tangent_kernel.problem import two_samples

RankMethod = Literal["auto", "svd", "gram"]


class RankResolutionWarning(ParamsymWarning):
    """The Gram path cannot resolve singular values as small as the requested tolerance."""


@dataclass
class FunctionalDimension:
    """The batch functional dimension and how it was measured.

    Attributes:
        rank: the functional dimension.
        singular_values: singular values of J, largest first (from eigenvalues on the Gram path).
        tolerance: singular values above it count.
        tolerance_rule: how the tolerance was set.
        dtype: the precision J was computed and decomposed in.
        method: ``"svd"`` (of J) or ``"gram"`` (eigenvalues of J Jᵀ or Jᵀ J).
        shape: (m·O, P).
        approximate: the Gram path could not resolve the requested tolerance.
    """

    rank: int
    singular_values: list[float] = field(repr=False)
    tolerance: float
    tolerance_rule: str
    dtype: str
    method: str
    shape: tuple[int, int]
    approximate: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parameter_jacobian(
    model: nn.Module,
    x: Inputs,
    params: Mapping[str, Tensor] | None = None,
    *,
    dtype: torch.dtype | None = None,
    batch_size: int = 256,
    output: OutputSelector = None,
) -> Tensor:
    """J of shape ``(m·O, P)``: row ``i·O + o`` is ∂f_o(x_i)/∂θ (parameters in ``flatten`` order),
    computed per sample with ``vmap(jacrev)`` in chunks of ``batch_size`` samples (one sample
    at a time for models that cannot run under ``vmap``, such as ``nn.LSTM``).

    ``x`` is ``(m, ...)``; ``output`` selects the tensor f from a forward that returns a tuple or
    a ``ModelOutput`` (as in :func:`~paramsym.tangent_kernel.ntk`)."""
    check_output_selector(output, "parameter_jacobian")
    require_module(model, "parameter_jacobian")
    check_deterministic(model, "parameter_jacobian")
    point = resolve_params(model, params)
    if dtype is not None:
        point = to_dtype(point, dtype)
        x = floats_to(x, dtype)

    def single(p: dict[str, Tensor], sample: Inputs) -> Tensor:
        return flat_outputs(model, p, one_sample_batch(sample), output, "parameter_jacobian")[0]

    rows = []
    with torch.no_grad(), differentiable_attention(model):  # the math kernel has a vmap rule
        for start in range(0, batch_length(x, "parameter_jacobian", "x"), batch_size):
            samples = take(x, slice(start, start + batch_size))
            chunk = jacobians_over_samples(single, point, samples, model)  # (b, O, *shape)
            b, o = next(iter(chunk.values())).shape[:2]
            rows.append(torch.cat([chunk[k].reshape(b * o, -1) for k in point], dim=1))
    return torch.cat(rows)


def functional_dimension(
    model: nn.Module,
    x: Inputs,
    *,
    tol: float | None = None,
    dtype: torch.dtype = torch.float64,
    method: RankMethod = "auto",
    params: Mapping[str, Tensor] | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    output: OutputSelector = None,
) -> FunctionalDimension:
    """Rank of the ``(m·O) × P`` parameter Jacobian on ``x`` (seed 004's batch functional
    dimension).

    Args:
        model: any module whose outputs depend on their own sample only.
        x: the batch ``(m, ...)`` (seed 004: the whole data set), or a mapping of keyword
            inputs with the batch axis first (``{"input_ids": ids}``).
        tol: absolute threshold on singular values; default ``max(m·O, P) · eps(dtype) · σ_max``
            (``torch.linalg.matrix_rank``'s rule).
        dtype: precision of J and the decomposition; ``torch.float32`` reproduces seed 004.
        method: ``"svd"`` of J, ``"gram"`` (eigenvalues of the smaller of J Jᵀ and Jᵀ J), or
            ``"auto"``: SVD when J fits in ``memory_budget``, else the Gram matrix.
        params: point θ (default: the model's parameters).
        output: which tensor of the forward's return value is f: ``None`` (the forward returns
            a tensor), a tuple index, a key or attribute name, or a callable of the raw output
            (as in :func:`~paramsym.tangent_kernel.ntk`). O counts its entries per sample.
    """
    if method not in ("auto", "svd", "gram"):
        raise InvalidArgumentError(
            f"functional_dimension: method must be 'auto', 'svd' or 'gram', got {method!r}"
        )
    check_output_selector(output, "functional_dimension")
    require_module(model, "functional_dimension")
    check_deterministic(model, "functional_dimension")
    point = resolve_params(model, params)
    check_finite(point, "functional_dimension: params")
    if isinstance(x, Tensor) and x.ndim and not x.shape[0]:
        samples = 0  # an empty batch: rank 0
    else:
        x = as_inputs(x, "functional_dimension", "x")
        samples = batch_length(x, "functional_dimension", "x")
    with torch.no_grad():
        if samples:
            probe = floats_to(two_samples(x), dtype)
            at = to_dtype(point, dtype)
            outputs = flat_outputs(model, at, probe, output, "functional_dimension").shape[1]
        else:
            outputs = 0
    rows = samples * outputs
    size = sum(p.numel() for p in point.values())
    element = torch.finfo(dtype).bits // 8
    if method == "auto":
        method = "svd" if rows * size * element <= memory_budget else "gram"
    eps = torch.finfo(dtype).eps
    if method == "svd":
        jacobian = parameter_jacobian(model, x, point, dtype=dtype, output=output)
        singular = torch.linalg.svdvals(jacobian)
        top = float(singular[0]) if singular.numel() else 0.0
        threshold = tol if tol is not None else max(rows, size) * eps * top
        rule = "given" if tol is not None else "max(m·O, P)·eps·σ_max"
        rank = int((singular > threshold).sum())
        return FunctionalDimension(
            rank, singular.tolist(), threshold, rule, str(dtype), "svd", (rows, size)
        )
    if rows <= size:
        kernel = ntk(
            model,
            x,
            mode="full",
            params=point,
            dtype=dtype,
            memory_budget=memory_budget,
            output=output,
        )
        gram = kernel_matrix(kernel)
    else:
        jac = parameter_jacobian(model, x, point, dtype=dtype, output=output)
        gram = jac.T @ jac
    eigenvalues = torch.linalg.eigvalsh(gram).flip(0).clamp_min(0.0)
    singular = eigenvalues.sqrt()
    top = float(singular[0]) if singular.numel() else 0.0
    threshold = tol if tol is not None else max(rows, size) * eps * top
    floor = gram.shape[0] * eps * top**2  # eigvalsh's backward error on a PSD Gram matrix
    approximate = threshold**2 < floor
    if approximate:
        warnings.warn(
            "functional_dimension(method='gram'): the Gram matrix resolves singular values "
            "down to "
            f"{floor**0.5:.2e} only (tolerance {threshold:.2e} requested); singular values in "
            "between are not counted. Use method='svd' (needs J in memory) for the exact rule",
            RankResolutionWarning,
            stacklevel=2,
        )
    rank = int((eigenvalues > max(threshold**2, floor)).sum())
    rule = (
        "given" if tol is not None else "max(m·O, P)·eps·σ_max"
    ) + ", but at least √(N·eps)·σ_max (Gram)"
    return FunctionalDimension(
        rank,
        singular.tolist(),
        max(threshold, floor**0.5),
        rule,
        str(dtype),
        "gram",
        (rows, size),
        approximate,
    )
