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
the same graph for the same model; the tests compare the symmetries found through each. To that
end export's metadata checks are dropped (:func:`_drop_checks`) and a tensor it holds under two
names (tied embeddings) gets its one name of ``named_parameters()``. Hugging Face models inside
a user's module are traced with their caches off (:func:`~paramsym.core.calls.caches_off`), and
a cache the model's own code turns on has its writes, concatenations onto an empty tensor,
removed (:func:`_drop_empty_concatenations`, noted in :attr:`TracedGraph.notes`). A
forward that neither can trace (data-dependent Python control flow, say) raises
:class:`TraceError` with torch's reason, which :func:`paramsym.symmetries` turns into a warning
and a fallback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor, nn
from torch.fx.experimental.proxy_tensor import make_fx

from paramsym.core.calls import caches_off, call_arguments
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
        notes: what was changed in the traced graph, where it was (:data:`CACHE_WRITE_NOTE`).
    """

    graph: torch.fx.Graph
    parameters: dict[str, str]
    buffers: dict[str, str]
    user_inputs: list[str]
    seconds: float
    tracer: str = ""
    notes: list[str] = field(default_factory=list)


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
    The model is traced as it is (train or eval mode), with ``use_cache=False`` for a Hugging
    Face model called directly and the caches of those inside it off
    (:func:`~paramsym.core.calls.caches_off`); its parameters and buffers are not changed.
    Raises :class:`TraceError` with the last tracer's reason when none can trace the forward.
    """
    unknown = [t for t in tracers if t not in TRACERS]
    if unknown or not tracers:
        raise InvalidArgumentError(f"trace_forward: tracers must be from {TRACERS}, got {tracers}")
    args, kwargs = as_arguments(example_input, model)
    error: TraceError | None = None
    with caches_off(model, example_input):  # the caches of models inside a user's module
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
    constants = {
        node: _attribute(module, str(node.target)) for node in graph.nodes if node.op == "get_attr"
    }
    writes = _drop_empty_concatenations(graph, constants)
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
        notes=_write_notes(writes),
    )


def _canonical(named: Iterator[tuple[str, Tensor]]) -> dict[str, str]:
    """Every name of a tensor -> its name in ``model.named_parameters()`` (or buffers), which
    name a tensor held twice (tied embeddings: ``lm_head.weight`` is ``wte.weight``) once, by
    its first name. ``torch.export`` gives each name its own placeholder; ``make_fx`` sees the
    first name only."""
    first: dict[int, str] = {}
    return {name: first.setdefault(id(tensor), name) for name, tensor in named}


def _attribute(module: nn.Module, path: str) -> Any:
    value: Any = module
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


def _write_notes(writes: int) -> list[str]:
    return [CACHE_WRITE_NOTE] if writes else []


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
    graph = exported.graph
    _drop_checks(graph)
    lifted = signature.inputs_to_lifted_tensor_constants
    constants = {
        node: exported.constants.get(lifted[node.name])
        for node in graph.nodes
        if node.op == "placeholder" and node.name in lifted
    }
    writes = _drop_empty_concatenations(graph, constants)
    parameters = _canonical(model.named_parameters(remove_duplicate=False))
    buffers = _canonical(model.named_buffers(remove_duplicate=False))
    return TracedGraph(
        graph,
        {p: parameters.get(n, n) for p, n in signature.inputs_to_parameters.items()},
        {p: buffers.get(n, n) for p, n in signature.inputs_to_buffers.items()},
        list(signature.user_inputs),
        0.0,
        notes=_write_notes(writes),
    )


_CHECKS = frozenset({"_assert_tensor_metadata", "_assert_scalar", "_assert_async"})
"""Ops ``torch.export`` inserts to check a tensor's metadata or a value: they compute nothing
that ``make_fx`` would record."""


def _drop_checks(graph: torch.fx.Graph) -> None:
    """Remove the check ops of :data:`_CHECKS` that nothing reads, so that an exported graph is
    the one ``make_fx`` gives: a check reading an intermediate tensor (``x.to(dtype)`` in
    export checks ``x`` first) would be one more reader of it, and subgraphs read as one op
    (RMSNorm, :mod:`~paramsym.symmetry.graph.patterns`) are fused only where nothing else
    reads their inner nodes."""
    for node in list(graph.nodes):
        if node.op == "call_function" and not node.users and _packet(node) in _CHECKS:
            graph.erase_node(node)


_PASS = frozenset({"lift_fresh_copy", "detach", "detach_", "clone", "alias", "to", "_to_copy"})
"""Ops a tensor constant may pass through, unchanged in value, on its way to a concatenation."""

CACHE_WRITE_NOTE = (
    "ignored the concatenations onto an empty tensor constant (the writes of a key/value cache "
    "left on inside the model, use_cache=True passed by the model's own code): concatenating "
    "nothing leaves a tensor unchanged"
)


def _packet(node: torch.fx.Node) -> str:
    packet = getattr(node.target, "overloadpacket", None)
    return str(packet.__name__) if packet is not None else ""


def _empty_operand(constant: torch.fx.Node, value: Any) -> tuple[list[torch.fx.Node], Any]:
    """(the chain from ``constant`` to the ``cat`` it alone feeds, that cat) when ``value`` is
    an empty tensor; ([], None) otherwise."""
    if not isinstance(value, Tensor) or value.numel() != 0:
        return [], None
    chain, node = [constant], constant
    while len(node.users) == 1:
        (user,) = node.users
        if _packet(user) == "cat":
            return chain, user
        if _packet(user) not in _PASS or user.args[0] is not node:
            break
        chain.append(user)
        node = user
    return [], None


def _drop_empty_concatenations(graph: torch.fx.Graph, constants: dict[torch.fx.Node, Any]) -> int:
    """Replace each concatenation of an empty tensor constant (``constants``: node -> value)
    and one other tensor of the result's shape and dtype by that tensor, and drop the
    constant; return how many were replaced. A Hugging Face ``DynamicCache`` left on writes
    each layer's keys and values as ``cat([tensor([]), k])`` and the attention reads the
    result: without this ``make_fx`` refuses the constant, and the walk of export's graph sees
    a concatenation with a tensor no parameter explains where the keys are."""
    removed = 0
    for constant, value in constants.items():
        chain, cat = _empty_operand(constant, value)
        if cat is None or not isinstance(cat.args[0], (list, tuple)):
            continue
        operands = [a for a in cat.args[0] if a is not chain[-1]]
        if len(operands) != 1 or not isinstance(operands[0], torch.fx.Node):
            continue
        kept, out = operands[0].meta.get("val"), cat.meta.get("val")
        if not isinstance(kept, Tensor) or not isinstance(out, Tensor):
            continue
        if kept.shape != out.shape or kept.dtype != out.dtype:
            continue
        cat.replace_all_uses_with(operands[0])
        graph.erase_node(cat)
        for node in reversed(chain[1:]):
            graph.erase_node(node)
        if constant.op == "get_attr":
            graph.erase_node(constant)
        removed += 1
    return removed
