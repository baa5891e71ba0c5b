"""The families the completeness audit found on decoders, gathered for :func:`~.analyse`.

Each is found by its own module, from the traced graph (never from module types):

* :mod:`.offset_norms` — rescaling through ``(1 + γ) ⊙`` norms (Gemma);
* :mod:`.bias_free_readers` — a LayerNorm's shift where its readers have no bias (GPT-Neo,
  Falcon);
* :mod:`.grouped_heads` — the rule of Falcon's grouped query/key/value layout (its subgraph
  found by :mod:`.patterns`);
* :mod:`.embedding_norms` — an embedding's LayerNorm whose output only norms read (BLOOM);
* :mod:`.bias_sums` — biases of parallel branches added into one sum (Phi, GPT-NeoX);
"""

from __future__ import annotations

from collections.abc import Sequence

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.graph import grouped_heads as _grouped  # noqa: F401  (registers its rule)
from paramsym.symmetry.graph.bias_free_readers import bias_free_reader_shifts
from paramsym.symmetry.graph.bias_sums import bias_sum_translations
from paramsym.symmetry.graph.embedding_norms import embedding_norm_affines
from paramsym.symmetry.graph.offset_norms import offset_norm_scalings
from paramsym.symmetry.graph.trace import TracedGraph


def decoder_symmetries(
    traced: TracedGraph, unexplained: dict[str, str], found: Sequence[Symmetry]
) -> list[Symmetry]:
    """The families of the module docstring; ``found``: what detection found before."""
    return [
        *offset_norm_scalings(traced, unexplained),
        *bias_sum_translations(traced, unexplained),
        *bias_free_reader_shifts(traced, unexplained, found),
        *embedding_norm_affines(traced, unexplained, found),
    ]
