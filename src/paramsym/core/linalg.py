"""Small linear-algebra helpers shared by the symmetry families."""

from __future__ import annotations

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
