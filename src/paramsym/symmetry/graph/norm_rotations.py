"""Finding :class:`~paramsym.symmetry.norm_rotation.NormRotation` on a traced graph.

A stream (:mod:`.streams`: what LayerNorm inputs are computed from through residual adds,
dropout, casts and layout ops) qualifies when nothing but LayerNorms reads it, everything added
into it is a writer that can rotate its output (embedding tables, linear maps and convolutions
with their biases, parameters added as they are, each used there only; a LayerNorm's shift
cannot) and the output of every LayerNorm reading it is read by linear maps alone (through
:mod:`.feature_axis` ops), with weights they alone use: ELECTRA's and ALBERT's embeddings,
which a norm and the embedding projection read.
"""

from __future__ import annotations

from typing import Any

from torch.fx import Node

from paramsym.symmetry.absorption import Reader
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph.absorptions import _linear_parts, _Params
from paramsym.symmetry.graph.feature_axis import readers_along_last_axis
from paramsym.symmetry.graph.streams import (
    _closed,
    _components,
    _live,
    _read_only_by_norms,
    _stream,
    _unexposed,
    _writer_entries,
)
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.norm_rotation import NormRotation, NormSite


def norm_rotation_symmetries(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The norm rotations of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    nodes = list(traced.graph.nodes)
    stream, writers = _stream(nodes, traced)
    live = _live(nodes)
    stream, writers = _unexposed(stream, writers, nodes, live)
    order = {n: i for i, n in enumerate(nodes)}
    found: list[Symmetry] = []
    for component in sorted(_components(set(stream)), key=lambda c: min(order[n] for n in c)):
        if not _read_only_by_norms(component, live):
            continue
        mine = sorted(component & writers.keys(), key=order.__getitem__)
        if not mine or any(op_name(w) == "layer_norm" for w in mine):
            continue  # a norm's output cannot rotate
        entries: list[tuple[str, int]] = []
        for writer in mine:
            found_entries = _writer_entries(traced, writer, writers[writer], unexplained)
            if not found_entries:
                break
            entries += [(name, axis) for name, axis, _ in found_entries]
        else:
            if not _closed(component, set(mine), writers):
                continue
            norms = _norms(component, nodes, params)
            if norms is not None and entries:
                width, sites = norms
                found.append(NormRotation(entries, sites, width=width, site=_site(entries)))
    return found


def _norms(
    component: set[Node], nodes: list[Node], params: _Params
) -> tuple[int, list[NormSite]] | None:
    """(width, the norms reading the stream with their linear readers), or ``None`` when some
    norm's output reaches anything else."""
    norms = sorted({u for n in component for u in n.users if op_name(u) == "layer_norm"},
                   key=nodes.index)  # fmt: skip
    widths: set[int] = set()
    sites: list[NormSite] = []
    for norm in norms:
        shape: Any = norm.args[1] if len(norm.args) > 1 else None
        if not isinstance(shape, (list, tuple)) or len(shape) != 1:
            return None
        width = int(shape[0])
        widths.add(width)
        gamma, beta = (norm.args[i] if len(norm.args) > i else None for i in (2, 3))
        gamma_name, beta_name = params.name(gamma), params.movable(beta)
        if (gamma is not None and gamma_name is None) or (beta is not None and beta_name is None):
            return None
        readers: list[Reader] = []
        for user, source in readers_along_last_axis(norm):
            parts = _linear_parts(user)
            if parts is None or parts[0] is not source:
                return None
            _, weight, _, axis = parts
            weight_name = params.movable(weight)
            weight_shape = params.shape(weight_name) if weight_name else None
            if weight_name is None or weight_shape is None or weight_shape[axis] != width:
                return None
            readers.append(Reader(weight_name, axis, 0, None))
        if not readers:
            return None
        sites.append(NormSite(gamma_name, beta_name, tuple(readers)))
    if len(widths) != 1 or not sites:
        return None
    return widths.pop(), sites


def _site(entries: list[tuple[str, int]]) -> str:
    names = list(dict.fromkeys(name.rpartition(".")[0] or name for name, _ in entries))
    return names[0] if len(names) == 1 else f"{names[0]},…,{names[-1]}"
