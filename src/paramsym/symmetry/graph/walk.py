"""Walking a traced graph: each op's rule records how feature spaces relate (the facts).

Rules live in :mod:`paramsym.symmetry.graph.rules`, keyed by aten op name; this module runs
them in graph order and applies the fallback for ops without a rule: their inputs' features
are blocked in every family and their outputs hold no members, and any parameter they read
is reported as used in an unrecognised way (so no symmetry may move it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from paramsym.symmetry.graph.facts import ALL_FAMILIES, Facts
from paramsym.symmetry.graph.patterns import fuse
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.values import ParamValue, TensorValue, Value

Rule = Callable[["Walk", "OpCall"], Any]
RULES: dict[str, Rule] = {}
HEAD_AWARE: set[str] = set()
"""Ops whose rules handle features split into attention heads; any other op sees such
features blocked (see :meth:`Walk.strip_heads`)."""


def rule(*names: str, heads: bool = False) -> Callable[[Rule], Rule]:
    """Register a rule for the aten ops ``names`` (overload packet names, e.g. ``"conv2d"``);
    ``heads=True`` if it handles features split into attention heads."""

    def register(function: Rule) -> Rule:
        for name in names:
            RULES[name] = function
            if heads:
                HEAD_AWARE.add(name)
        return function

    return register


@dataclass
class OpCall:
    """One op of the graph: its name, module, evaluated arguments and output shape(s)."""

    op: str
    module: str
    args: list[Any]
    kwargs: dict[str, Any]
    shape: Any  # tuple for a tensor output, list of tuples for several
    used_outputs: frozenset[int] = frozenset()  # of several outputs, those read later

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        if index < len(self.args):
            return self.args[index]
        return self.kwargs.get(name, default)

    @property
    def where(self) -> str:
        return f"{self.op} in '{self.module}'" if self.module else f"{self.op} in the model"


@dataclass
class Walk:
    """State of the walk: the facts so far and the value of every node."""

    traced: TracedGraph
    facts: Facts = field(default_factory=Facts)
    env: dict[str, Any] = field(default_factory=dict)
    origins: dict[int, tuple[str, Any]] = field(default_factory=dict)
    """space -> (kind, data): how a space was made ("linear": (weight, bias, module),
    "softmax": the input member), for the output translation."""

    def unexplained(self, value: Any, call: OpCall) -> None:
        """Report parameters in ``value`` that ``call`` uses in a way no rule understands."""
        for item in _flatten(value):
            if isinstance(item, ParamValue):
                self.facts.unexplained.setdefault(item.name, f"used by {call.where}")

    def strip_heads(self, value: Any, call: OpCall) -> Any:
        """``value`` without its head-split members, which are blocked: ``call``'s rule does
        not know how the op treats heads."""
        if not isinstance(value, TensorValue) or not value.head_axes:
            return value
        for axis in value.head_axes:
            self.facts.block(value.axes[axis], ALL_FAMILIES, f"{call.where} on attention heads")
        kept = {a: m for a, m in value.axes.items() if a not in value.head_axes}
        return TensorValue(value.shape, kept, {}, value.zero)

    def block_all(self, value: Any, reason: str) -> None:
        for item in _flatten(value):
            if isinstance(item, TensorValue):
                for member in item.axes.values():
                    self.facts.block(member, ALL_FAMILIES, reason)

    def apply(self, function: Rule, call: OpCall) -> Any:
        """``function(self, call)``; a rule that fails on a layout it does not foresee (an
        internal error, not the user's) is reported instead of raised: the op is walked by
        :meth:`fallback` and every parameter of ``call``'s module is marked unexplained
        with the failure, so no symmetry moves it and ``symmetries`` warns (or raises with
        ``strict=True``) naming them."""
        try:
            return function(self, call)
        except Exception as err:  # reported: the op, its module and the error
            reason = (
                f"the symmetry rule of {call.where} failed ({type(err).__name__}: {err}); "
                "please report it"
            )
            prefix = f"{call.module}." if call.module else ""
            for name in self.traced.parameters.values():
                if name.startswith(prefix):
                    self.facts.unexplained.setdefault(name, reason)
            return self.fallback(call)

    def fallback(self, call: OpCall) -> Any:
        """No rule: block every input feature, report parameters, output without members."""
        reason = f"{call.where} has no symmetry rule"
        for value in [*call.args, *call.kwargs.values()]:
            self.block_all(value, reason)
            self.unexplained(value, call)
        return blank(call.shape)


def blank(shape: Any) -> Any:
    """Values without members for an output of shape(s) ``shape``."""
    if shape is None:
        return None
    if isinstance(shape, list):
        return [blank(s) for s in shape]
    return TensorValue(tuple(shape))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _shape_of(meta: Any) -> Any:
    if isinstance(meta, torch.Tensor):
        return tuple(int(s) for s in meta.shape)
    if isinstance(meta, (list, tuple)):
        return [_shape_of(m) for m in meta]
    return None


def _module_of(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path).replace("L['self'].", "").replace("L__self__.", "")


def op_name(node: torch.fx.Node) -> str:
    target = node.target
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet.__name__)
    return getattr(target, "__name__", str(target))


def run(traced: TracedGraph) -> Walk:
    """Run every node's rule in order; return the walk with its facts."""
    walk = Walk(traced)
    env = walk.env
    fusion = fuse(traced.graph)
    for node in traced.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = _placeholder(traced, node)
        elif node.name in fusion.skipped:  # inside a fused subgraph: read by it alone
            env[node.name] = blank(_meta_shape(node))
        elif node.op == "call_function":
            fused = fusion.calls.get(node.name)
            raw_args, raw_kwargs = (
                (fused.args, fused.kwargs) if fused else (list(node.args), dict(node.kwargs))
            )
            args = [_evaluate(env, a) for a in raw_args]
            kwargs = {k: _evaluate(env, v) for k, v in raw_kwargs.items()}
            name = fused.op if fused else op_name(node)
            in_place = name not in RULES and name.endswith("_") and name[:-1] in RULES
            used = frozenset(
                int(user.args[1])
                for user in node.users
                if user.target is operator.getitem and user.users
            )
            call = OpCall(
                name[:-1] if in_place else name,
                _module_of(node),
                args,
                kwargs,
                _meta_shape(node),
                used,
            )
            function = RULES.get(call.op)
            if call.op not in HEAD_AWARE:
                call.args = [walk.strip_heads(a, call) for a in call.args]
            env[node.name] = walk.apply(function, call) if function else walk.fallback(call)
            if in_place and not fused and isinstance(node.args[0], torch.fx.Node):
                # ``relu_(a)``, ``a += b``: later reads of ``a`` see the result
                env[node.args[0].name] = env[node.name]
        elif node.op == "output":
            outputs = _evaluate(env, node.args[0])
            walk.block_all(outputs, "the model's output")
            walk.env["__output__"] = outputs
    return walk


def _meta_shape(node: torch.fx.Node) -> Any:
    return _shape_of(node.meta.get("val"))


def _placeholder(traced: TracedGraph, node: torch.fx.Node) -> Value | Any:
    shape = _shape_of(node.meta.get("val"))
    if node.name in traced.parameters or node.name in traced.buffers:
        buffer = node.name in traced.buffers
        name = traced.buffers[node.name] if buffer else traced.parameters[node.name]
        shape = tuple(shape or ())
        return ParamValue(name, shape, tuple(range(len(shape))), buffer=buffer)
    return blank(shape)


def _evaluate(env: dict[str, Any], arg: Any) -> Any:
    if isinstance(arg, torch.fx.Node):
        return env.get(arg.name)
    if isinstance(arg, (list, tuple)):
        return type(arg)(_evaluate(env, a) for a in arg)
    return arg
