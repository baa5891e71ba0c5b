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
