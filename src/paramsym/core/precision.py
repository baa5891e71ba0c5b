"""Run a float64 model without the down-casts inside its forward.

Some models compute part of their forward in a lower precision whatever their own dtype:
Hugging Face's RMSNorm (Llama, Mistral, Qwen2, Gemma) casts its input to float32, normalises
and casts back, and rotary embeddings are computed in float32. In a float64 model those steps
round to float32, so a quantity that is exactly zero in exact arithmetic (the Jacobian along a
symmetry) comes out near 1e-9 instead of 1e-16 (notes 006 §1). :class:`KeepFloat64` runs the
forward with every such cast of a float64 tensor to a lower floating precision left in float64,
and counts them: the function of exact arithmetic, which is what a rank of that function's
Jacobian is about.

>>> import torch
>>> x = torch.ones(2, dtype=torch.float64)
>>> with KeepFloat64() as kept:
...     y = x.to(torch.float32)
>>> y.dtype, kept.count
(torch.float64, 1)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

_LOWER = frozenset({torch.float32, torch.float16, torch.bfloat16})
_METHODS = {
    Tensor.float: torch.float32,
    Tensor.half: torch.float16,
    Tensor.bfloat16: torch.bfloat16,
}


def _is_lower(dtype: Any) -> bool:
    return isinstance(dtype, torch.dtype) and dtype in _LOWER


class KeepFloat64(TorchFunctionMode):
    """Inside the block, ``t.to(float32/float16/bfloat16)``, ``t.float()``, ``t.half()``,
    ``t.bfloat16()`` and ``t.type(...)`` of a float64 tensor return it in float64 (a device move
    in the same call still happens), and an op on a float64 tensor asked for a lower ``dtype=``
    (BLOOM's ``softmax(scores, dtype=torch.float32)``) computes in float64. :attr:`count` is
    the number of casts kept."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        source = args[0] if args else None
        if isinstance(source, Tensor) and source.dtype == torch.float64:
            if func in _METHODS:
                self.count += 1
                return source
            if func is Tensor.to:
                kept = self._keep(args, kwargs)
                if kept is not None:
                    self.count += 1
                    return func(*kept[0], **kept[1])
            if func is Tensor.type and args[1:] and _is_lower(args[1]):
                self.count += 1
                return source
            if _is_lower(kwargs.get("dtype")):  # softmax(x, dim, dtype=torch.float32), ...
                self.count += 1
                return func(*args, **{**kwargs, "dtype": torch.float64})
        return func(*args, **kwargs)

    @staticmethod
    def _keep(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict] | None:
        """``(args, kwargs)`` of a ``Tensor.to`` call with a lower dtype replaced by float64,
        or ``None`` when the call asks for no lower floating dtype."""
        if _is_lower(kwargs.get("dtype")):
            return args, {**kwargs, "dtype": torch.float64}
        for i, arg in enumerate(args[1:], start=1):
            if _is_lower(arg):
                return (*args[:i], torch.float64, *args[i + 1 :]), kwargs
            if isinstance(arg, Tensor) and _is_lower(arg.dtype) and arg.is_floating_point():
                return (*args[:i], arg.device, torch.float64, *args[i + 1 :]), kwargs
        return None
