"""Kernel choices that second-order autodiff needs.

PyTorch's fused ``scaled_dot_product_attention`` kernels on the CPU (flash, memory-efficient)
have no double backward: a Hessian-vector product or a forward-over-reverse derivative through
an attention layer fails with ``derivative for
aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented``. The math
kernel computes the same attention with ordinary ops, which autodiff differentiates to any
order; :func:`differentiable_attention` selects it for a block of code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def differentiable_attention() -> Iterator[None]:
    """Run ``scaled_dot_product_attention`` with its math kernel inside the block.

    >>> import torch
    >>> q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    >>> with differentiable_attention():
    ...     out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    ...     (g,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    ...     (h,) = torch.autograd.grad(g.sum(), q)
    >>> h.shape
    torch.Size([1, 2, 3, 4])
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield
