"""Checks of the model an analysis is given: that it is an ``nn.Module`` at all, and that its
forward is a deterministic function of the parameters.

The NTK, Hessian-vector products, Lanczos and teleportation all treat the model as a fixed
function of its parameters. Dropout in training mode draws a new mask at every forward pass: two
identical NTK calls then differ by tens of percent, and a Hessian product is the Hessian of a
different random function each time. Such a model is refused with an error that names the
module and says what to do.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError


def require_module(model: Any, where: str) -> nn.Module:
    """``model`` if it is an ``nn.Module``; otherwise the one error every analysis gives.

    >>> require_module(lambda x: x, "ntk")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    paramsym.errors.InvalidArgumentError: ntk: expected a torch.nn.Module, got function; ...
    """
    if not isinstance(model, nn.Module):
        raise InvalidArgumentError(
            f"{where}: expected a torch.nn.Module, got {type(model).__name__}; wrap the "
            "function in an nn.Module whose forward calls it"
        )
    return model


def random_modules(model: nn.Module) -> list[str]:
    """Names of the modules that make the forward random: dropout layers in training mode with
    ``p > 0`` (``nn.Dropout``, ``Dropout1d/2d/3d``, ``AlphaDropout``, …)."""
    return [
        name or "(the model)"
        for name, module in model.named_modules()
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.training and module.p > 0
    ]


def check_deterministic(model: nn.Module, where: str) -> None:
    """Raise :class:`~paramsym.errors.InvalidArgumentError` when the forward is random.

    >>> import torch
    >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
    >>> check_deterministic(model, "ntk")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    paramsym.errors.InvalidArgumentError: ntk: dropout '1' is in training mode, ...
    >>> check_deterministic(model.eval(), "ntk")
    """
    found = random_modules(model)
    if found:
        listing = ", ".join(f"'{name}'" for name in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise InvalidArgumentError(
            f"{where}: dropout {listing}{more} is in training mode, so every forward pass draws "
            "a new mask and the result is random; call model.eval() first (or set the "
            "dropout's p to 0)"
        )


def check_input_dtype(x: Any, dtype: torch.dtype | None, where: str, name: str = "x") -> None:
    """Raise when the floating input ``x`` and the floating parameters differ in dtype (torch's
    own error names neither the input nor the fix).

    >>> x = torch.zeros(2, dtype=torch.float64)
    >>> check_input_dtype(x, torch.float32, "ntk", "x1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    paramsym.errors.InvalidArgumentError: ntk: x1 is torch.float64 but the model's ...
    """
    if isinstance(x, Tensor) and x.is_floating_point() and dtype is not None and x.dtype != dtype:
        raise InvalidArgumentError(
            f"{where}: {name} is {x.dtype} but the model's parameters are {dtype}; convert one "
            f"to the other ({name}.to({dtype}), or model.to({x.dtype}))"
        )
