"""S_k of a radial-basis-function network (dissertation Ex. 1.2.10).

``f(x) = Σ_i w_i φ(‖x − c_i‖/b_i)`` is a sum over units, so permuting the units' (w_i, b_i,
c_i) together preserves f: centers and widths are re-indexed like incoming rows, the output
weight's columns like an outgoing weight. Zero-dimensional (no flat directions).
"""

from __future__ import annotations

from torch import nn

from paramsym.nn.rbf import RBFNetwork
from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.detect import BlockContext, register_block
from paramsym.symmetry.discrete import NeuronPermutation


class RBFPermutation(NeuronPermutation):
    """S_k: permutations of the units (center, width, output weight) of an RBF network."""

    family = "rbf_permutation"


def analyse_rbf(module: nn.Module, prefix: str, context: BlockContext) -> list[Symmetry]:
    """:class:`~paramsym.nn.RBFNetwork`."""
    assert isinstance(module, RBFNetwork)
    units = module.centers.shape[0]
    return [
        RBFPermutation(
            units,
            [Slot(f"{prefix}centers", 0), Slot(f"{prefix}widths", 0)],
            [Slot(f"{prefix}weight", 1, -1.0)],
            site=prefix[:-1] if prefix else "rbf",
        )
    ]


register_block(RBFNetwork, analyse_rbf)
