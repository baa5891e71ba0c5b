"""Kernel choices that second-order autodiff needs.

Attention. PyTorch's fused ``scaled_dot_product_attention`` kernels on the CPU (flash,
memory-efficient) have no double backward: a Hessian-vector product or a forward-over-reverse
derivative through an attention layer fails with ``derivative for
aten::_scaled_dot_product_flash_attention_for_cpu_backward is not implemented``. The math
kernel computes the same attention with ordinary ops, which autodiff differentiates to any
order. (Its masked softmax, boolean and additive masks and fully masked rows included, is
differentiated exactly in both modes and to second order: checked against plain ops in
``tests/test_hvp_methods.py``.)

Embeddings with a ``padding_idx``. ``F.embedding``'s reverse-mode derivative leaves out the
row ``padding_idx`` (the row is documented as fixed: it "does not contribute to the
gradient"), but its forward-mode derivative is the lookup of the tangent, that row included
(pytorch/pytorch#93950, closed as a documentation note, torch 2.0-2.13). A derivative that
mixes the modes is then no derivative of one function: forward-over-reverse and
reverse-over-forward Hessian-vector products, and ``jvp`` against ``vjp``, disagree with
reverse-over-reverse wherever the padding token occurs in the input (tiny OPT 4 %, Gemma 9 %,
``BertForMaskedLM`` 5 %, and non-symmetric ⟨u, Hv⟩ ≠ ⟨Hu, v⟩ on a ``BertModel``, torch 2.13).
:func:`differentiable_attention` makes forward mode agree with reverse mode: the lookups of the
padding row are detached, so every mode treats that row as the constant that reverse mode and
optimizers treat it as (values unchanged). :func:`differentiable_attention` selects both for
a block of code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional
from torch.overrides import TorchFunctionMode

# the embedding lookups and their first positional parameters
_LOOKUPS: dict[Any, tuple[str, str, str]] = {
    functional.embedding: ("input", "weight", "padding_idx"),  # padding_idx None: none
    torch.embedding: ("weight", "indices", "padding_idx"),  # padding_idx -1: none
}


def _padded_positions(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The mask of the positions that look up the padding row in an embedding call, or
    ``None`` (no ``padding_idx``, or arguments that are not tensors)."""
    names = _LOOKUPS[func]
    values = {**dict(zip(names, args, strict=False)), **kwargs}
    indices = values.get("input" if func is functional.embedding else "indices")
    weight, padding = values.get("weight"), values.get("padding_idx")
    if func is torch.embedding and padding is not None and padding < 0:
        padding = None  # the aten op's "none"; F.embedding's negative padding_idx counts back
    if not isinstance(weight, Tensor) or not isinstance(indices, Tensor) or padding is None:
        return None
    padding = int(padding) % weight.shape[0]
    return (indices == padding).unsqueeze(-1)


class _FixedPaddingRows(TorchFunctionMode):
    """``F.embedding`` / ``torch.embedding`` with ``padding_idx``: the output at the positions
    that look the padding row up is detached, so forward mode, like reverse mode, gives that
    row no derivative (pytorch/pytorch#93950). Values are unchanged."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func not in _LOOKUPS or not isinstance(out, Tensor) or not out.is_floating_point():
            return out
        padded = _padded_positions(func, tuple(args), kwargs)
        return out if padded is None else torch.where(padded, out.detach(), out)


@contextlib.contextmanager
def fixed_padding_rows() -> Iterator[None]:
    """Inside the block, embedding rows named by ``padding_idx`` are constants to forward mode
    as they are to reverse mode (pytorch/pytorch#93950); values are unchanged.

    >>> import torch
    >>> weight = torch.randn(3, 2, dtype=torch.float64)
    >>> ids, tangent = torch.tensor([0, 1]), torch.ones(3, 2, dtype=torch.float64)
    >>> def lookup(w):
    ...     return torch.nn.functional.embedding(ids, w, padding_idx=0)
    >>> torch.func.jvp(lookup, (weight,), (tangent,))[1][0]  # torch: the padding row moves
    tensor([1., 1.], dtype=torch.float64)
    >>> with fixed_padding_rows():
    ...     torch.func.jvp(lookup, (weight,), (tangent,))[1][0]  # as in reverse mode: fixed
    tensor([0., 0.], dtype=torch.float64)
    """
    with _FixedPaddingRows():
        yield


@contextlib.contextmanager
def differentiable_attention(model: nn.Module | None = None) -> Iterator[None]:
    """Derivatives of every order and mode, consistent with each other, inside the block:
    ``scaled_dot_product_attention`` runs its math kernel (the fused CPU kernels have no double
    backward) and embedding padding rows are constants in forward mode as in reverse mode
    (:func:`fixed_padding_rows`). Given the ``model`` the block differentiates, the padding
    rows' torch-function mode (a Python call per torch op) is entered only if the model has
    an ``nn.Embedding`` with a ``padding_idx``.

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

    padded = model is None or any(
        isinstance(m, nn.Embedding) and m.padding_idx is not None for m in model.modules()
    )
    with sdpa_kernel(SDPBackend.MATH), fixed_padding_rows() if padded else contextlib.nullcontext():
        yield
