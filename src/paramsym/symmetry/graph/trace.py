"""Tracing a model's forward into an aten-level graph whose inputs are named.

Detection runs on the graph of ``torch.export.export(model, args, strict=False)``: it traces
any ``forward`` that runs (custom ``forward`` methods, Hugging Face models), keeps high-level
aten ops (``linear``, ``conv2d``, ``batch_norm``, ``layer_norm``,
``scaled_dot_product_attention``) and its graph signature names every placeholder that is a
parameter or a buffer (see ``../shared/DESIGN.md``, "Which trace"). A forward that cannot be
exported (data-dependent Python control flow, say) raises :class:`TraceError` with torch's
reason, which :func:`paramsym.symmetries` turns into a warning and a fallback.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.errors import InvalidArgumentError


class TraceError(Exception):
    """The forward could not be traced; ``reason`` is torch's message, shortened."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class TracedGraph:
    """A traced forward: the fx graph and what its placeholders are.

    Attributes:
        graph: the aten-level ``torch.fx.Graph``.
        parameters: placeholder name -> parameter name (as in ``model.named_parameters()``).
        buffers: placeholder name -> buffer name (as in ``model.named_buffers()``).
        user_inputs: placeholder names of the example input's tensors.
        seconds: time the trace took.
    """

    graph: torch.fx.Graph
    parameters: dict[str, str]
    buffers: dict[str, str]
    user_inputs: list[str]
    seconds: float


def as_arguments(example_input: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``example_input`` as (args, kwargs): a tensor, a tuple of positional inputs, or a dict
    of keyword inputs (e.g. ``{"input_ids": ids}`` for a Hugging Face model)."""
    if isinstance(example_input, Tensor):
        return (example_input,), {}
    if isinstance(example_input, tuple):
        return example_input, {}
    if isinstance(example_input, Mapping):
        return (), dict(example_input)
    raise InvalidArgumentError(
        "symmetries: example_input must be a tensor, a tuple of positional inputs or a dict of "
        f"keyword inputs, got {type(example_input).__name__}"
    )


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), type(error).__name__)
    return f"{type(error).__name__}: {first[:300]}"


def trace_forward(model: nn.Module, example_input: Any) -> TracedGraph:
    """Export ``model`` (non-strict) on ``example_input`` and name its placeholders.

    The model is exported as it is (train or eval mode); its parameters and buffers are not
    changed. Raises :class:`TraceError` when torch cannot export the forward.
    """
    args, kwargs = as_arguments(example_input)
    start = time.perf_counter()
    state = {k: b.clone() for k, b in model.named_buffers()}
    try:
        exported = torch.export.export(model, args, kwargs, strict=False)
    except Exception as error:  # torch raises many types; all mean "cannot trace"
        raise TraceError(_short(error)) from error
    finally:
        # Export in training mode may run BatchNorm's running-statistics update on real
        # buffers in some torch versions: put them back.
        with torch.no_grad():
            for name, buffer in model.named_buffers():
                if name in state and buffer.shape == state[name].shape:
                    buffer.copy_(state[name])
    seconds = time.perf_counter() - start
    signature = exported.graph_signature
    parameters = dict(signature.inputs_to_parameters)
    buffers = dict(signature.inputs_to_buffers)
    user_inputs = list(signature.user_inputs)
    return TracedGraph(exported.graph, parameters, buffers, user_inputs, seconds)
