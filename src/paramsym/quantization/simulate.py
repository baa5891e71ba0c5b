"""Simulated low-precision inference: a model's linear maps computed with fake-quantized weights
and fake-quantized inputs (issue 31), the setting of QuaRot and SpinQuant ("W4A4": 4-bit weights,
4-bit activations at the inputs of every linear map).

A *reader* is a module that multiplies its input by a weight: ``nn.Linear``, Hugging Face's
``Conv1D`` (weight (in, out)) and ``nn.Conv1d/2d/3d``. With ``weights`` given, every reader's
weight is replaced by its fake-quantized copy (per channel: one grid per output channel, axis 0
of a linear or convolution weight, axis 1 of a ``Conv1D``); biases, embeddings and norms stay in
floating point, as in the papers. With ``activations`` given, a forward pre-hook replaces each
reader's input by its fake-quantized copy (per channel: one grid per token, the row of its
features; a convolution's per-position feature vectors likewise). With ``ste=True`` both carry
the identity's gradient (straight-through estimator), which is what a learned rotation or a
teleport on the quantized loss differentiates through.

:func:`quantized_call` runs a model once in that setting at given parameters;
:func:`fake_quantize` returns a quantized copy to evaluate as an ordinary module;
:func:`reader_inputs` records the reader inputs of one call (for outlier measures).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, cast

import torch
from torch import Tensor, nn

from paramsym.core.calls import call_arguments
from paramsym.core.params import stateless_call
from paramsym.quantization.quantizer import Quantizer

_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def reads_last_axis(module: nn.Module) -> bool:
    """Whether ``module``'s weight multiplies the last axis of its input: ``nn.Linear`` or
    Hugging Face's ``Conv1D`` (weight (in, out))."""
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def is_reader(module: nn.Module) -> bool:
    """Whether ``module`` multiplies its input by a weight: a map of its last axis
    (:func:`reads_last_axis`) or a convolution."""
    return reads_last_axis(module) or isinstance(module, _CONVOLUTIONS)


def readers(model: nn.Module, skip: Sequence[str] = ()) -> dict[str, nn.Module]:
    """The reader modules of ``model`` by name, without those named in ``skip`` (or below
    them)."""
    return {
        name: m
        for name, m in model.named_modules()
        if is_reader(m) and not any(name == s or name.startswith(f"{s}.") for s in skip)
    }


def output_axis(module: nn.Module) -> int:
    """The axis of a reader's weight that indexes its output channels."""
    return 1 if type(module).__name__ == "Conv1D" else 0


def quantize_weight(
    module: nn.Module, weight: Tensor, q: Quantizer, *, ste: bool = False
) -> Tensor:
    """``weight`` of the reader ``module`` on ``q``'s grid (per channel: its output channels)."""
    if q.granularity == "channel":
        q = replace(q, axis=output_axis(module))
    return q.fake(weight, ste=ste)


def quantize_input(module: nn.Module, x: Tensor, q: Quantizer, *, ste: bool = False) -> Tensor:
    """The input ``x`` of ``module`` on ``q``'s grid (per channel: one grid per token, the
    vector of features a reader multiplies; the channel axis of a convolution's input)."""
    if q.granularity == "tensor":
        return q.fake(x, ste=ste)
    features = -1 if not isinstance(module, _CONVOLUTIONS) else 1
    moved = x.movedim(features, -1)
    rows = replace(q, axis=0).fake(moved.reshape(-1, moved.shape[-1]), ste=ste)
    return rows.reshape(moved.shape).movedim(-1, features)


@contextmanager
def quantized_inputs(
    modules: Mapping[str, nn.Module], q: Quantizer | None, *, ste: bool = False
) -> Iterator[None]:
    """While open, every module of ``modules`` sees its first input on ``q``'s grid (nothing
    when ``q`` is ``None``)."""
    if q is None:
        yield
        return

    def hook(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (quantize_input(module, args[0], q, ste=ste), *args[1:])

    handles = [m.register_forward_pre_hook(hook) for m in modules.values()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def quantized_parameters(
    model: nn.Module,
    params: Mapping[str, Tensor],
    weights: Quantizer | None,
    *,
    ste: bool = False,
    skip: Sequence[str] = (),
) -> dict[str, Tensor]:
    """``params`` with every reader's weight fake-quantized by ``weights`` (unchanged when
    ``weights`` is ``None``)."""
    out = dict(params)
    if weights is None:
        return out
    for name, module in readers(model, skip).items():
        key = f"{name}.weight" if name else "weight"
        if key in out:
            out[key] = quantize_weight(module, out[key], weights, ste=ste)
    return out


def quantized_call(
    model: nn.Module,
    params: Mapping[str, Tensor],
    inputs: Any,
    *,
    weights: Quantizer | None = None,
    activations: Quantizer | None = None,
    ste: bool = False,
    skip: Sequence[str] = (),
) -> Any:
    """``model``'s output on ``inputs`` at ``params`` (name → tensor, any subset of its
    parameters), its readers' weights and inputs fake-quantized (module docstring); ``skip``
    names readers kept in floating point (e.g. ``["lm_head"]``, as QuaRot keeps the head)."""
    args, kwargs = call_arguments(model, inputs, "quantized_call")
    state = quantized_parameters(model, params, weights, ste=ste, skip=skip)
    with quantized_inputs(readers(model, skip), activations, ste=ste):
        return stateless_call(model, state, args, kwargs)


def fake_quantize(
    model: nn.Module,
    weights: Quantizer | None = None,
    activations: Quantizer | None = None,
    *,
    skip: Sequence[str] = (),
) -> nn.Module:
    """A copy of ``model`` whose readers compute with fake-quantized weights (stored) and
    inputs (a forward pre-hook on each): simulated low-precision inference as an ordinary
    module. ``model`` is unchanged.

    >>> import torch
    >>> model = torch.nn.Linear(4, 2)
    >>> q = fake_quantize(model, Quantizer(4), Quantizer(8))
    >>> int(q.weight.unique().numel()) <= 15
    True
    """
    quantized = copy.deepcopy(model)
    modules = readers(quantized, skip)
    if weights is not None:
        with torch.no_grad():
            for module in modules.values():
                weight = cast(Tensor, module.weight)  # readers all have a weight tensor
                weight.copy_(quantize_weight(module, weight, weights))
    if activations is not None:
        for module in modules.values():
            module.register_forward_pre_hook(
                lambda m, args: (quantize_input(m, args[0], activations), *args[1:])
            )
    return quantized


@contextmanager
def reader_inputs(
    modules: Mapping[str, nn.Module], store: dict[str, Tensor]
) -> Iterator[dict[str, Tensor]]:
    """While open, each call of a module of ``modules`` puts its first input into ``store``
    under the module's name (with its graph: differentiable in the parameters)."""

    def recorder(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            store[name] = args[0]

        return hook

    handles = [m.register_forward_pre_hook(recorder(n)) for n, m in modules.items()]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()
