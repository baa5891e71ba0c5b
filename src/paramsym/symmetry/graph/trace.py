"""Tracing a model's forward into an aten-level graph whose inputs are named.

Detection runs on an aten-level graph that keeps high-level ops (``linear``, ``conv2d``,
``batch_norm``, ``layer_norm``, ``scaled_dot_product_attention``), names every placeholder that
is a parameter or a buffer and records, per node, the module it came from (``nn_module_stack``;
see ``../shared/DESIGN.md``, "Which trace"). Two tracers give that graph:

* ``make_fx`` over ``torch.func.functional_call`` with fake tensors (pre-dispatch, the module
  stack recorded): placeholders are the parameters, then the buffers, then the input tensors,
  in that order. Measured on the benchmark models it takes about half the time of ``export``
  (``benchmarks/bench_detect.py``), so it is tried first;
* ``torch.export.export(model, args, strict=False)``, whose graph signature names the
  placeholders: it handles what the first cannot (a forward that branches on a value torch
  can only know at run time under export's rules, tensor constants held as plain attributes).

Both trace any ``forward`` that runs (custom ``forward`` methods, Hugging Face models) and give
the same graph for the same model; the tests compare the symmetries found through each. A
forward that neither can trace (data-dependent Python control flow, say) raises
:class:`TraceError` with torch's reason, which :func:`paramsym.symmetries` turns into a warning
and a fallback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor, nn
from torch.fx.experimental.proxy_tensor import make_fx

from paramsym.core.calls import call_arguments
from paramsym.core.params import stateless_call
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
        tracer: which tracer made the graph (one of :data:`TRACERS`).
    """

    graph: torch.fx.Graph
    parameters: dict[str, str]
    buffers: dict[str, str]
    user_inputs: list[str]
    seconds: float
    tracer: str = ""


def as_arguments(
    example_input: Any, model: nn.Module | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``example_input`` as (args, kwargs) for ``model``: see
    :func:`paramsym.core.calls.call_arguments` (a tensor, a tuple of positional inputs, or a
    mapping of keyword inputs; ``use_cache=False`` for a model that takes it)."""
    return call_arguments(model if model is not None else nn.Identity(), example_input)


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = next((line for line in text if line.strip()), type(error).__name__)
    return f"{type(error).__name__}: {first[:300]}"


TRACERS = ("make_fx", "export")
"""The tracers :func:`trace_forward` tries, in order."""


def trace_forward(
    model: nn.Module, example_input: Any, tracers: tuple[str, ...] = TRACERS
) -> TracedGraph:
    """Trace ``model`` on ``example_input`` and name its placeholders.

    Tries each of ``tracers`` in turn (see the module docstring) and returns the first graph.
    The model is traced as it is (train or eval mode); its parameters and buffers are not
    changed. Raises :class:`TraceError` with the last tracer's reason when none can trace the
    forward.
    """
    unknown = [t for t in tracers if t not in TRACERS]
    if unknown or not tracers:
        raise InvalidArgumentError(f"trace_forward: tracers must be from {TRACERS}, got {tracers}")
    args, kwargs = as_arguments(example_input, model)
    error: TraceError | None = None
    for tracer in tracers:
        start = time.perf_counter()
        try:
            traced = (
                _make_fx(model, args, kwargs)
                if tracer == "make_fx"
                else _export(model, args, kwargs)
            )
        except TraceError as failure:
            error = failure
            continue
        traced.seconds = time.perf_counter() - start
        traced.tracer = tracer
        return traced
    assert error is not None
    raise error


def _make_fx(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
    """``make_fx`` over ``functional_call`` (fake tensors, pre-dispatch, module stack)."""
    parameters = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]

    def forward(params: dict[str, Tensor], bufs: dict[str, Tensor], *inputs: Tensor) -> Any:
        flat = list(leaves)
        for index, tensor in zip(tensors, inputs, strict=True):
            flat[index] = tensor
        call_args, call_kwargs = pytree.tree_unflatten(flat, spec)
        return stateless_call(model, {**params, **bufs}, call_args, call_kwargs)

    forward._orig_mod = model  # type: ignore[attr-defined]  # make_fx records the module stack
    # The module-stack tracer records every node's Python stack trace unless told not to: a
    # third of the trace's time, and detection never reads them.
    config = torch.fx.config
    emit = getattr(config, "do_not_emit_stack_traces", None)  # torch >= 2.13 only
    if emit is not None:
        config.do_not_emit_stack_traces = True
    try:
        module = make_fx(
            forward,
            tracing_mode="fake",
            pre_dispatch=True,
            record_module_stack=True,
        )(parameters, buffers, *(leaves[i] for i in tensors))
    except Exception as error:  # torch raises many types; all mean "cannot trace"
        raise TraceError(_short(error)) from error
    finally:
        if emit is not None:
            config.do_not_emit_stack_traces = emit
    graph = module.graph
    if any(node.op == "get_attr" for node in graph.nodes):
        raise TraceError("make_fx: the forward uses tensor constants that are not buffers")
    placeholders = [node.name for node in graph.nodes if node.op == "placeholder"]
    names = [*parameters, *buffers]
    if len(placeholders) != len(names) + len(tensors):
        raise TraceError("make_fx: placeholders do not match the parameters, buffers and inputs")
    return TracedGraph(
        graph,
        dict(zip(placeholders, parameters, strict=False)),
        dict(zip(placeholders[len(parameters) :], buffers, strict=False)),
        placeholders[len(names) :],
        0.0,
    )


def _export(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TracedGraph:
    """``torch.export.export(model, args, kwargs, strict=False)``."""
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
    signature = exported.graph_signature
    return TracedGraph(
        exported.graph,
        dict(signature.inputs_to_parameters),
        dict(signature.inputs_to_buffers),
        list(signature.user_inputs),
        0.0,
    )
