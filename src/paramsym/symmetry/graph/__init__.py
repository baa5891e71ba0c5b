"""Symmetry detection on the traced computation graph (any ``forward``).

``graph_symmetries(model, example_input)`` traces the forward (:mod:`.trace`), walks the
graph with one rule per op kind (:mod:`.rules`, :mod:`.arith_rules`, :mod:`.layout_rules`)
recording how feature spaces relate (:mod:`.facts`), and solves for the groups acting on
each class of features (:mod:`.solve`). It is what :func:`paramsym.symmetries` runs when
given an ``example_input``.

Per class of features it reports the largest continuous group that passes everything
between the maps producing and reading them (GL > O > per-feature rescaling > one common
scale), the permutations, and the sign flips: the same catalogue as the layer-by-layer
analysis of ``nn.Sequential`` chains (dissertation Table 1.1), on any architecture.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from paramsym.symmetry.base import NeuronSymmetry, Preserves, Symmetry
from paramsym.symmetry.chain import is_softmax_cross_entropy
from paramsym.symmetry.graph import arith_rules as _arith  # noqa: F401  (registers rules)
from paramsym.symmetry.graph import layout_rules as _layout  # noqa: F401
from paramsym.symmetry.graph import recurrent_rules as _recurrent  # noqa: F401
from paramsym.symmetry.graph import rules as _rules  # noqa: F401
from paramsym.symmetry.graph.absorptions import (
    attention_bias_translations,
    embedding_translations,
    norm_translations,
)
from paramsym.symmetry.graph.additive import (
    parameter_sum_translations,
    score_bias_translations,
)
from paramsym.symmetry.graph.attention_rules import attention_role, rotary_pairs
from paramsym.symmetry.graph.batchnorm_absorptions import batchnorm_eval_symmetries
from paramsym.symmetry.graph.decoders import decoder_symmetries
from paramsym.symmetry.graph.facts import Family
from paramsym.symmetry.graph.heads import head_permutations
from paramsym.symmetry.graph.linear_streams import linear_stream_symmetries
from paramsym.symmetry.graph.norm_rotations import norm_rotation_symmetries
from paramsym.symmetry.graph.recurrent_absorptions import recurrent_bias_translations
from paramsym.symmetry.graph.repeat import trace_repeated
from paramsym.symmetry.graph.residual_shifts import residual_norm_shifts
from paramsym.symmetry.graph.shared_calls import SiteFinder, shared_call_symmetries
from paramsym.symmetry.graph.shears import stream_shears
from paramsym.symmetry.graph.solve import Class, build, classes, conflicts, slots_of, valid
from paramsym.symmetry.graph.streams import mean_translations
from paramsym.symmetry.graph.subspaces import subspace_reader_translations
from paramsym.symmetry.graph.trace import TRACERS, TracedGraph, TraceError, trace_forward
from paramsym.symmetry.graph.values import TensorValue
from paramsym.symmetry.graph.walk import Walk, run
from paramsym.symmetry.translation import SoftmaxTranslation

__all__ = ["GraphAnalysis", "TraceError", "analyse", "graph_symmetries"]

_CONTINUOUS = (Family.GL, Family.ORTHOGONAL, Family.ROTARY, Family.SCALING)
_SEARCH = (*_CONTINUOUS, Family.PERMUTATION, Family.SIGN)
"""Families in the order they are decided: a continuous family is reported for a class only
where no larger continuous group (earlier in this order) already covers its features."""
_ORDER = {Family.GL: 0, Family.ORTHOGONAL: 0, Family.ROTARY: 0, Family.SCALING: 0,
          Family.PERMUTATION: 1, Family.SIGN: 2}  # fmt: skip


@dataclass
class GraphAnalysis:
    """What detection found on a traced graph.

    Attributes:
        symmetries: the symmetries, in model order.
        unexplained: parameter -> how it is used that no rule understands (no symmetry moves
            it).
        trace_seconds, walk: the trace time and the walk (facts and values), for inspection
            (``None`` in an analysis kept by :mod:`~paramsym.symmetry.graph.cache`).
        notes: how the graph was made, where not by one plain trace (repeated blocks, cache
            writes ignored: see :class:`~paramsym.symmetry.graph.trace.TracedGraph`).
    """

    symmetries: list[Symmetry]
    unexplained: dict[str, str]
    trace_seconds: float
    walk: Walk | None = field(repr=False)
    notes: list[str] = field(default_factory=list)


def _covered(cls: Class, covered: dict[int, list[tuple[int, int]]]) -> bool:
    return all(
        any(a <= start and stop <= b for a, b in covered.get(space, []))
        for space, start, stop in cls.atoms
    )


def _cover(cls: Class, covered: dict[int, list[tuple[int, int]]]) -> None:
    for space, start, stop in cls.atoms:
        covered.setdefault(space, []).append((start, stop))


def symmetries_of(walk: Walk) -> list[Symmetry]:
    """All symmetries of the walked graph (see :mod:`.solve`)."""
    facts = walk.facts
    placeholders = {**walk.traced.parameters, **walk.traced.buffers}
    shapes = {name: tuple(walk.env[node].shape) for node, name in placeholders.items()}
    found: list[tuple[tuple[int, int], int, Symmetry]] = []
    covered: dict[int, list[tuple[int, int]]] = {}
    valid_atoms: dict[Family, set[tuple[int, int, int]]] = {}
    for family in _SEARCH:
        family_classes = classes(facts, family)
        conflicted = conflicts(family_classes)
        usable = {
            id(c) for c in family_classes if valid(c, facts.unexplained, conflicted, facts.pinned)
        }
        for cls in family_classes:
            if id(cls) not in usable:
                continue
            if family is Family.PERMUTATION and cls.width < 2:
                continue  # S_1 is trivial
            if family in _CONTINUOUS and _covered(cls, covered):
                continue
            slots = slots_of(cls, family, shapes)
            if not slots:
                continue
            role = attention_role(facts, cls.atoms)
            pairs = rotary_pairs(facts, cls.atoms) if family is Family.ROTARY else ()
            if family is Family.ROTARY and (role is None or pairs is None):
                continue  # no rotary embedding pairs these features: GL decided them
            if family in _CONTINUOUS:
                _cover(cls, covered)
            producers = [
                facts.spaces[space].module
                for space, _, _ in sorted(cls.atoms)
                if family in facts.spaces[space].sources
            ]
            symmetry = build(cls, family, slots, producers, role, pairs or ())
            found.append((cls.key, _ORDER[family], symmetry))
        valid_atoms[family] = {a for c in family_classes if id(c) in usable for a in c.atoms}
    for key, symmetry in head_permutations(facts, valid_atoms):
        found.append((key, 3, symmetry))
    found.sort(key=lambda item: (item[0], item[1]))
    buffers = set(walk.traced.buffers.values())
    for _, _, symmetry in found:
        if isinstance(symmetry, NeuronSymmetry):
            symmetry.buffer_names = frozenset(s.name for s in symmetry.slots if s.name in buffers)
    return _unique([s for _, _, s in found])


def _unique(symmetries: list[Symmetry]) -> list[Symmetry]:
    seen: dict[str, int] = {}
    for s in symmetries:
        count = seen.get(s.name, 0)
        seen[s.name] = count + 1
        if count:
            s.name = f"{s.name}#{count + 1}"
    return symmetries


def _translation(walk: Walk, loss_fn: Callable[..., Any] | None) -> list[Symmetry]:
    """The last layer's softmax translation: the output is a linear map's features, and
    either a softmax over them follows in the model or the loss is softmax cross-entropy."""
    outputs = walk.env.get("__output__")
    if not isinstance(outputs, (list, tuple)) or len(outputs) != 1:
        return []
    out = outputs[0]
    if not isinstance(out, TensorValue) or not out.ndim:
        return []
    member = out.member(-1)
    if member is None or member.start != 0:
        return []
    origin = walk.origins.get(member.space)
    preserves: Preserves = "loss"
    if origin is not None and origin[0] == "softmax":
        preserves = "function"
        origin = walk.origins.get(origin[1].space)
    elif not is_softmax_cross_entropy(loss_fn):
        return []
    if origin is None or origin[0] != "linear":
        return []
    weight, bias, _ = origin[1]
    if weight in walk.facts.unexplained or (bias and bias in walk.facts.unexplained):
        return []
    shape = _param_shape(walk, weight)
    if shape is None or len(shape) != 2:
        return []
    return [
        SoftmaxTranslation(
            weight, bias, shape[1], preserves=preserves, site=weight.rsplit(".", 1)[0]
        )
    ]


def _param_shape(walk: Walk, name: str) -> tuple[int, ...] | None:
    nodes = {param: node for node, param in walk.traced.parameters.items()}
    return tuple(walk.env[nodes[name]].shape) if name in nodes else None


def analyse(
    model: nn.Module,
    example_input: Any,
    loss_fn: Callable[..., Any] | None = None,
    tracers: tuple[str, ...] = TRACERS,
    repeat_blocks: bool = True,
) -> GraphAnalysis:
    """Trace ``model`` on ``example_input`` (with the first of ``tracers`` that succeeds, see
    :func:`~paramsym.symmetry.graph.trace.trace_forward`) and detect its symmetries (raises
    :class:`TraceError` when the forward cannot be traced). ``repeat_blocks``: a stack of
    identical blocks is traced once per distinct block and its graph repeated
    (:mod:`~paramsym.symmetry.graph.repeat`; the same symmetries, a fraction of the trace)."""
    traced, notes = _quiet_trace(model, example_input, tracers, repeat_blocks)
    walk = run(traced)
    unexplained = walk.facts.unexplained
    found = symmetries_of(walk)
    buffers = dict(model.named_buffers())
    site_finders: list[SiteFinder] = [
        mean_translations,
        norm_translations,
        embedding_translations,
        residual_norm_shifts,
        parameter_sum_translations,
        score_bias_translations,
        subspace_reader_translations,
        stream_shears,
        norm_rotation_symmetries,
        recurrent_bias_translations,
        lambda t, u: batchnorm_eval_symmetries(t, u, buffers),
    ]
    found += [s for finder in site_finders[:3] for s in finder(traced, unexplained)]
    found += attention_bias_translations(traced, unexplained, found)
    found += [s for finder in site_finders[3:] for s in finder(traced, unexplained)]
    found += shared_call_symmetries(
        traced, unexplained, found, site_finders, [attention_bias_translations]
    )
    found += linear_stream_symmetries(traced, unexplained, found)
    found += decoder_symmetries(traced, unexplained, found)
    found += _translation(walk, loss_fn)
    return GraphAnalysis(found, dict(walk.facts.unexplained), traced.seconds, walk, notes)


def _quiet_trace(
    model: nn.Module, example_input: Any, tracers: tuple[str, ...], repeat_blocks: bool
) -> tuple[TracedGraph, list[str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own notes (e.g. LSTM flat weights)
        repeated = trace_repeated(model, example_input, tracers) if repeat_blocks else None
        if repeated is not None:
            return repeated[0], [*repeated[0].notes, repeated[1]]
        traced = trace_forward(model, example_input, tracers)
        return traced, list(traced.notes)


def graph_symmetries(
    model: nn.Module, example_input: Any, loss_fn: Callable[..., Any] | None = None
) -> list[Symmetry]:
    """The symmetries :func:`analyse` finds."""
    return analyse(model, example_input, loss_fn).symmetries
