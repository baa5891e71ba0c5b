"""One kernel computation's validated inputs, and the pieces every NTK method shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.core.batches import (
    Inputs,
    as_inputs,
    batch_length,
    floats_to,
    take,
    tensors,
    trailing_shapes,
)
from paramsym.core.model_checks import check_deterministic, check_input_dtype, require_module
from paramsym.core.params import Params, check_finite, resolve_params, to_dtype
from paramsym.errors import InvalidArgumentError, ShapeError
from paramsym.tangent_kernel.outputs import OutputSelector, check_output_selector, flat_outputs

Mode = Literal["full", "trace", "diagonal"]

DEFAULT_MEMORY_BUDGET = 2 * 1024**3
"""Bytes of intermediates (Jacobians, cotangents, products) one tile pair may use."""


@dataclass
class KernelProblem:
    """Validated inputs of one kernel computation.

    Attributes:
        model, params: the network and the point θ (parameters only; buffers come from the
            model, copied).
        x1, x2: inputs ``(n1, ...)`` and ``(n2, ...)`` (tensors, or named tensors with the
            batch axis first: :mod:`paramsym.core.batches`); ``same`` when x2 was not given.
        outputs: O, the number of outputs per sample (the selected output flattened after the
            batch axis).
        mode: the kernel's shape (see :func:`~paramsym.tangent_kernel.ntk`).
        output: the :data:`~paramsym.tangent_kernel.outputs.OutputSelector`.
    """

    model: nn.Module
    params: Params
    x1: Inputs
    x2: Inputs
    outputs: int
    mode: Mode
    same: bool
    output: OutputSelector = None

    @property
    def n1(self) -> int:
        return batch_length(self.x1, "ntk", "x1")

    @property
    def n2(self) -> int:
        return batch_length(self.x2, "ntk", "x2")

    def forward(self, params: Mapping[str, Tensor], x: Inputs) -> Tensor:
        """``(b, ...) -> (b, O)`` at ``params``, buffers copied so the model is never changed."""
        return flat_outputs(self.model, params, x, self.output, "ntk")


def _check_sample_independent(model: nn.Module) -> None:
    check_deterministic(model, "ntk")
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            raise InvalidArgumentError(
                f"ntk: BatchNorm '{name}' is in training mode, so each output depends on the "
                "whole batch and the per-sample kernel is undefined; call model.eval() first"
            )


def _check_input(x: Any, name: str, model: nn.Module) -> Inputs:
    x = as_inputs(x, "ntk", name)
    takes_indices = any(isinstance(m, nn.Embedding) for m in model.modules())
    if isinstance(x, Tensor) and not x.is_floating_point() and not takes_indices:
        raise InvalidArgumentError(
            f"ntk: {name} has dtype {x.dtype}; the model has no embedding, so pass floating "
            "inputs (e.g. x.float())"
        )
    check_finite([(name, t) for t in tensors(x) if t.is_floating_point()], "ntk")
    return x


def two_samples(x: Inputs) -> Inputs:
    """The first two samples of ``x`` (the first one twice when there is only one)."""
    return take(x, slice(0, 2) if batch_length(x, "ntk", "x") >= 2 else [0, 0])


def prepare(
    model: nn.Module,
    x1: Inputs,
    x2: Inputs | None,
    mode: str,
    params: Mapping[str, Tensor] | None,
    dtype: torch.dtype | None,
    output: OutputSelector = None,
) -> KernelProblem:
    """Check the arguments of :func:`~paramsym.tangent_kernel.ntk` and count the outputs."""
    require_module(model, "ntk")
    if mode not in ("full", "trace", "diagonal"):
        raise InvalidArgumentError(f"ntk: mode must be 'full', 'trace' or 'diagonal', got {mode!r}")
    check_output_selector(output, "ntk")
    _check_sample_independent(model)
    point = resolve_params(model, params)
    check_finite(point, "ntk: params")
    x1 = _check_input(x1, "x1", model)
    same = x2 is None
    x2 = x1 if x2 is None else _check_input(x2, "x2", model)
    if trailing_shapes(x1) != trailing_shapes(x2):
        raise ShapeError(
            f"ntk: x1 {trailing_shapes(x1)} and x2 {trailing_shapes(x2)} differ after the "
            "batch axis"
        )
    if dtype is not None:
        point = to_dtype(point, dtype)
        x1, x2 = floats_to(x1, dtype), floats_to(x2, dtype)
    floating = next((t.dtype for t in point.values() if t.is_floating_point()), None)
    for name, x in (("x1", x1), ("x2", x2)):
        for t in tensors(x):
            check_input_dtype(t, floating, "ntk", name)
    problem = KernelProblem(model, point, x1, x2, 0, mode, same, output)  # type: ignore[arg-type]
    try:
        with torch.no_grad():
            # Two samples, so that an output whose first axis is not the batch is caught.
            problem.outputs = problem.forward(point, two_samples(x1)).shape[1]
    except (RuntimeError, IndexError) as error:
        raise ShapeError(
            f"ntk: the model cannot evaluate x1 of shape {trailing_shapes(x1)} after the batch "
            f"axis: {error}"
        ) from None
    return problem


def finish(full_block: Tensor, mode: Mode) -> Tensor:
    """Reduce a ``(b1, b2, O, O)`` block to the mode's shape."""
    if mode == "full":
        return full_block
    diagonal = torch.diagonal(full_block, dim1=2, dim2=3)  # (b1, b2, O)
    return diagonal if mode == "diagonal" else diagonal.sum(-1)


def allocate(problem: KernelProblem) -> Tensor:
    """Zeros in the kernel's shape for ``problem.mode``."""
    n1, n2, o = problem.n1, problem.n2, problem.outputs
    shape = {"full": (n1, n2, o, o), "trace": (n1, n2), "diagonal": (n1, n2, o)}[problem.mode]
    ref = next(iter(problem.params.values()))
    return torch.zeros(shape, dtype=ref.dtype, device=ref.device)


def tiles(n: int, size: int) -> list[slice]:
    """Consecutive slices of at most ``size`` of ``range(n)``."""
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def element_size(problem: KernelProblem) -> int:
    """Bytes per number in the parameters' dtype."""
    return next(iter(problem.params.values())).element_size()


__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "KernelProblem",
    "Mode",
    "allocate",
    "element_size",
    "finish",
    "prepare",
    "tiles",
    "two_samples",
]
