"""Small linear-algebra helpers shared by the symmetry families, and float64 reductions of
lower-precision tensors a chunk at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor


def matrix_exp(m: Tensor) -> Tensor:
    """``exp(m)`` for a square matrix, accurate to float64 precision.

    ``torch.linalg.matrix_exp`` on a single matrix uses a degree-8 Taylor step with a wrong
    coefficient (pytorch/pytorch#196592, fixed after 2.14): in float64 its error reaches 2e-10
    for norms near 0.05, which would break the 1e-10 invariance of the group actions. Batched
    inputs take a correct path, so the matrix is exponentiated in a batch of two (checked
    against ``scipy.linalg.expm`` in the tests). Differentiable, and it runs on any device.
    """
    return torch.linalg.matrix_exp(torch.stack([m, m]))[0]


SMALL_EXP_NORM = 0.25
"""The induced 1-norm up to which :func:`small_exp_pair` applies."""


def small_exp_pair(m: Tensor) -> tuple[Tensor, Tensor]:
    """``(exp(M), exp(−M))`` for a batch of square matrices ``(..., n, n)`` of induced
    1-norm at most :data:`SMALL_EXP_NORM` (the generators of a teleport step), to the dtype's
    precision: the Taylor polynomial of the least degree K with ‖M‖^{K+1}/(K+1)! ≤ eps/2
    (the series' remainder, relative), its odd and even parts giving both exponentials from
    the same powers, so that the inverse costs no inversion and exp(M)·exp(−M) = I to a few
    eps.

    ``torch.linalg.matrix_exp`` spends about 30 matrix products' time on every batch whatever
    its norm (3.4 ms for 12 matrices of 64 × 64 in float32 on one CPU thread, where a product
    takes 0.08 ms, and an inverse 1.5 ms more); here a few products suffice (1.0 ms for both).
    Larger norms need scaling and squaring, which loses the exact inverse: the caller takes
    ``torch.linalg.matrix_exp`` there. Checked against ``scipy.linalg.expm`` in the tests.
    """
    if m.ndim < 2 or m.shape[-1] != m.shape[-2]:
        raise ValueError(f"small_exp_pair: square matrices expected, got shape {tuple(m.shape)}")
    norm = float(m.abs().sum(dim=-2).amax()) if m.numel() else 0.0
    if not norm <= SMALL_EXP_NORM:
        raise ValueError(
            f"small_exp_pair: induced 1-norm {norm:.3g} > {SMALL_EXP_NORM}; use "
            "torch.linalg.matrix_exp"
        )
    eps = torch.finfo(m.dtype).eps
    degree, term = 1, norm
    while term * norm / (degree + 1) > eps / 2:
        degree += 1
        term = term * norm / degree
    even = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device).expand_as(m).clone()
    odd = m.clone()
    power, factorial = m, 1.0
    for k in range(2, degree + 1):
        power = power @ m
        factorial *= k
        if k % 2:
            odd = odd + power / factorial
        else:
            even = even + power / factorial
    return even + odd, even - odd


def svd(matrix: Tensor, full_matrices: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """``torch.linalg.svd``, falling back to LAPACK's ``gesvd`` where it fails to converge.

    On the CPU torch calls ``gesdd`` (divide and conquer), which can stop with "the algorithm
    failed to converge" on large matrices with many (near-)repeated singular values, such as
    the stacked tangent images of exact discovery (3024 × 2916 at gl(54)). ``gesvd`` (QR
    iteration, through :func:`scipy.linalg.svd`) is slower but converges there; it computes
    the same decomposition, so the fallback changes the time, not the result.
    """
    try:
        return torch.linalg.svd(matrix, full_matrices=full_matrices)
    except torch.linalg.LinAlgError:
        import scipy.linalg

        u, s, vh = scipy.linalg.svd(
            matrix.detach().cpu().numpy(), full_matrices=full_matrices, lapack_driver="gesvd"
        )
        return tuple(  # type: ignore[return-value]
            torch.from_numpy(a).to(dtype=matrix.dtype, device=matrix.device) for a in (u, s, vh)
        )


CHUNK = 1 << 20
"""Entries widened to float64 at a time by :func:`float64_dot` and :func:`float64_squared_distance`
(8 MiB per operand): widening whole tensors made two float64 copies of each, about half of
weight matching's time on GPT-2-small outside its cost matrices."""


def float64_dot(a: Tensor, b: Tensor) -> float:
    """⟨a, b⟩ in float64, widening ``CHUNK`` entries at a time (a BLAS dot per chunk)."""
    a, b = a.reshape(-1), b.reshape(-1)
    if a.dtype == torch.float64 and b.dtype == torch.float64:
        return float(torch.dot(a, b))
    return math.fsum(
        float(torch.dot(a[i : i + CHUNK].double(), b[i : i + CHUNK].double()))
        for i in range(0, a.numel(), CHUNK)
    )


def float64_squared_distance(a: Tensor, b: Tensor) -> float:
    """‖a − b‖² in float64, widening ``CHUNK`` entries at a time."""
    a, b = a.reshape(-1), b.reshape(-1)
    total = 0.0
    for i in range(0, a.numel(), CHUNK):
        d = a[i : i + CHUNK].double() - b[i : i + CHUNK].double()
        total += float(torch.dot(d, d))
    return total


def sum_of_squares(t: Tensor, dim: Sequence[int]) -> Tensor:
    """Σ t² over the axes ``dim``, in ``t``'s dtype (the per-neuron rates of a rescaling).

    ``torch.linalg.vector_norm`` is the fastest where the summed axes are innermost in memory
    (0.5 ms over the rows of a 4864 × 896 float32 matrix, one thread) and ten times slower
    where they are not (18 ms over its columns, a ``Linear`` weight's input axis); there the
    squares are summed as they lie, a block of the outermost summed axis at a time so that
    the squares stay in cache (1.4 ms; 2–6 ms at once, as page faults of a tensor-sized
    temporary allow, and 24 ms in float64)."""
    axes = [d % t.ndim for d in dim]
    summed = [t.stride(d) for d in axes if t.shape[d] > 1]
    kept = [t.stride(d) for d in range(t.ndim) if d not in axes and t.shape[d] > 1]
    if not summed or not kept or max(summed) < min(kept):
        return torch.linalg.vector_norm(t, dim=axes) ** 2
    outer = max((d for d in axes if t.shape[d] > 1), key=t.stride)
    step = max(1, (CHUNK // 2) * t.shape[outer] // max(t.numel(), 1))
    total: Tensor | None = None
    for start in range(0, t.shape[outer], step):
        block = t.narrow(outer, start, min(step, t.shape[outer] - start))
        part = (block * block).sum(dim=axes)
        total = part if total is None else total.add_(part)
    assert total is not None
    return total
