"""Finding :class:`~paramsym.symmetry.embedding_norm.EmbeddingNormAffine` on a traced graph.

A ``layer_norm`` (eps > 0, γ and β parameters used there only) whose input is an ``embedding``
lookup, through ops that pass values unchanged, of a table used there only, and whose output
is a writer of a residual stream that only mean-subtracting norms read (its β is a writer of a
:class:`~paramsym.symmetry.translation.StreamTranslation` already found: BLOOM's
``word_embeddings_layernorm``).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch.fx import Node

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.embedding_norm import EmbeddingNormAffine
from paramsym.symmetry.graph.absorptions import _Params
from paramsym.symmetry.graph.feature_axis import PASS
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name
from paramsym.symmetry.translation import StreamTranslation


def embedding_norm_affines(
    traced: TracedGraph, unexplained: dict[str, str], found: Sequence[Symmetry]
) -> list[Symmetry]:
    """The families of the module docstring."""
    written = {n for s in found if isinstance(s, StreamTranslation) for n, _ in s.writers}
    if not written:
        return []
    params = _Params(traced, unexplained)
    out: list[Symmetry] = []
    for node in traced.graph.nodes:
        if op_name(node) != "layer_norm" or len(node.args) < 4:
            continue
        shape, gamma, beta = node.args[1], node.args[2], node.args[3]
        eps = float(node.args[4]) if len(node.args) > 4 else 1e-5
        gamma_name, beta_name = params.movable(gamma), params.movable(beta)
        if gamma_name is None or beta_name not in written or not eps > 0:
            continue
        if not isinstance(shape, (list, tuple)) or len(shape) != 1:
            continue
        source = node.args[0]
        while isinstance(source, Node) and op_name(source) in PASS and len(source.users) == 1:
            source = source.args[0]
        if not isinstance(source, Node) or op_name(source) != "embedding":
            continue
        if len(source.users) != 1:
            continue
        table = params.movable(source.args[0])
        table_shape = params.shape(table) if table is not None else None
        if table is None or table_shape is None or table_shape[1:] != tuple(shape):
            continue
        assert beta_name is not None
        site = beta_name.rpartition(".")[0] or beta_name
        out.append(EmbeddingNormAffine(table, gamma_name, beta_name, eps=eps, width=int(shape[0]),
                                       site=site))  # fmt: skip
    return out
