"""Finding :class:`~paramsym.symmetry.offset_scaling.OffsetNormScaling` on a traced graph.

The walk reads Gemma's RMSNorm, ``x · rsqrt(mean(x²) + eps) · (1 + γ)``, as one ``rms_norm``
call with ``weight_offset=1`` (:mod:`~paramsym.symmetry.graph.patterns`), and its rescaling is
affine in the stored γ, which no slot of the walk's groups expresses. Here: every such norm
whose γ is a parameter used there only, and whose output (followed through the ops of
:mod:`~paramsym.symmetry.graph.feature_axis`) is read by linear maps alone, each reading it as
its whole input along the normalised axis with a weight used there only, gets the rescaling of
``(1 + γ)`` against the readers' columns. Anything else reading the output (a residual add, the
model's output) would see the scale, and the norm gets nothing.
"""

from __future__ import annotations

from torch.fx import Node

from paramsym.symmetry.base import Slot, Symmetry
from paramsym.symmetry.graph.absorptions import _Params, linear_readers
from paramsym.symmetry.graph.patterns import fuse
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.offset_scaling import OffsetNormScaling


def offset_norm_scalings(traced: TracedGraph, unexplained: dict[str, str]) -> list[Symmetry]:
    """The ``offset_rescaling`` symmetries of the traced graph (module docstring)."""
    params = _Params(traced, unexplained)
    nodes = {node.name: node for node in traced.graph.nodes}
    found: list[Symmetry] = []
    for name, call in fuse(traced.graph).calls.items():
        offset = float(call.kwargs.get("weight_offset", 0.0))
        if call.op != "rms_norm" or not offset or len(call.args) < 3:
            continue
        gamma, shape = call.args[2], call.args[1]
        gamma_name = params.movable(gamma)
        if gamma_name is None or not isinstance(shape, (list, tuple)) or len(shape) != 1:
            continue
        width = int(shape[0])
        readers = _readers(nodes[name], params, width)
        if readers:
            found.append(OffsetNormScaling(gamma_name, offset, readers, width=width))
    return found


def _readers(node: Node, params: _Params, width: int) -> list[Slot]:
    """The readers' weights as slots on their input axis, or nothing when anything but such a
    linear map reads ``node``'s output (their biases stay: the scale acts on the input)."""
    readers, _, only_linear = linear_readers(node, params, width, bias_moves=False)
    return [Slot(r.weight, r.axis, -1.0) for r in readers] if only_linear else []
