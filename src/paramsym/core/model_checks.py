"""Checks of the model an analysis is given: that it is an ``nn.Module`` at all, that its
forward is a deterministic function of the parameters, and what a module-by-module reading of
an ``nn.Sequential`` would get wrong (:func:`chain_hazards`).

The NTK, Hessian-vector products, Lanczos and teleportation all treat the model as a fixed
function of its parameters. Dropout in training mode draws a new mask at every forward pass: two
identical NTK calls then differ by tens of percent, and a Hessian product is the Hessian of a
different random function each time. Such a model is refused with an error that names the
module and says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from paramsym.errors import InvalidArgumentError, ShapeError


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


def architecture_signature(model: nn.Module) -> list[tuple[str, str]]:
    """``(name, module description)`` for every submodule: type and ``extra_repr``."""
    return [(name, f"{type(m).__name__}({m.extra_repr()})") for name, m in model.named_modules()]


def check_same_architecture(a: nn.Module, b: nn.Module, where: str) -> None:
    """Raise :class:`~paramsym.errors.ShapeError`, naming ``where`` and the first module that
    differs, unless ``a`` and ``b`` have the same modules (names, types, settings) in the same
    order: what weight matching, alignment and merging need of two models."""
    sig_a, sig_b = architecture_signature(a), architecture_signature(b)
    for (name_a, desc_a), (name_b, desc_b) in zip(sig_a, sig_b, strict=False):
        if (name_a, desc_a) != (name_b, desc_b):
            raise ShapeError(
                f"{where}: the two models differ at module '{name_a or name_b}': {desc_a} versus "
                f"{desc_b}; both networks must have the same architecture"
            )
    if len(sig_a) != len(sig_b):
        raise ShapeError(
            f"{where}: the two models have {len(sig_a)} and {len(sig_b)} modules; both networks "
            "must have the same architecture"
        )


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


HazardKind = Literal["reused_module", "shared_parameter", "parametrised_weight", "eval_batchnorm"]
"""What makes the module-by-module reading of an ``nn.Sequential`` wrong (see
:func:`chain_hazards`)."""


@dataclass(frozen=True)
class ChainHazard:
    """One reason the module-by-module reading of an ``nn.Sequential`` is not exact."""

    kind: HazardKind
    message: str


def chain_hazards(model: nn.Sequential) -> list[ChainHazard]:
    """What the module-by-module reading of an ``nn.Sequential`` would get wrong: a module
    object placed twice (``named_children`` lists it once, so the chain would skip a use), a
    parameter shared by two modules, a parametrised weight (``weight_norm``: the parameters are
    not the weight the forward uses), BatchNorm in evaluation mode with running statistics
    (they must move with the channels). Empty when the chain reading is exact."""
    hazards: list[ChainHazard] = []
    seen: dict[int, str] = {}

    def visit(seq: nn.Sequential, prefix: str) -> None:
        for name, child in seq._modules.items():
            if child is None:
                continue
            where = f"{prefix}{name}"
            if id(child) in seen:
                message = f"module '{where}' is the same object as '{seen[id(child)]}'"
                hazards.append(ChainHazard("reused_module", message))
                continue
            seen[id(child)] = where
            if isinstance(child, nn.Sequential):
                visit(child, f"{where}.")

    visit(model, "")
    reused = bool(hazards)  # a reused module repeats its parameters: reported once, above
    owners: dict[int, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in owners and not reused:
            message = f"parameter '{name}' is shared with '{owners[id(parameter)]}'"
            hazards.append(ChainHazard("shared_parameter", message))
        owners.setdefault(id(parameter), name)
    for name, module in model.named_modules():
        if parametrize.is_parametrized(module):
            message = f"module '{name}' has parametrised weights ({type(module).__name__})"
            hazards.append(ChainHazard("parametrised_weight", message))
        if (
            isinstance(module, nn.modules.batchnorm._BatchNorm)
            and not module.training
            and module.running_mean is not None
        ):
            message = f"BatchNorm '{name}' is in evaluation mode with running statistics"
            hazards.append(ChainHazard("eval_batchnorm", message))
    return hazards
