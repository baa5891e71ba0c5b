"""Finding the evaluation-mode BatchNorm families of :mod:`paramsym.symmetry.batchnorm_eval` on
a traced graph.

A ``batch_norm`` op (``training`` false, running statistics given: a BatchNorm in evaluation
mode) whose input is the output of a convolution (not transposed) or of a linear map on
``(N, C)`` inputs, through ops that pass values unchanged, and nothing else reads that output,
gets

* :class:`~paramsym.symmetry.batchnorm_eval.BatchNormScaling` where the norm has γ and β;
* :class:`~paramsym.symmetry.batchnorm_eval.BatchNormShift` where the producer has a bias and
  the norm a β.

Every parameter moved must be used by that op alone and understood by the walk (a tied weight
would carry the move elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor
from torch.fx import Node

from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.batchnorm_eval import BatchNormScaling, BatchNormShift, Statistics
from paramsym.symmetry.graph.absorptions import _PASS, _Params, _shape
from paramsym.symmetry.graph.trace import TracedGraph
from paramsym.symmetry.graph.walk import op_name

_CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d", "convolution", "_convolution"})


def batchnorm_eval_symmetries(
    traced: TracedGraph, unexplained: dict[str, str], buffers: Mapping[str, Tensor]
) -> list[Symmetry]:
    """The rescalings and bias shifts of every evaluation-mode BatchNorm in the graph (module
    docstring); ``buffers``: the model's buffers by name (the running statistics read)."""
    params = _Params(traced, unexplained)
    found: list[Symmetry] = []
    for node in traced.graph.nodes:
        norm = _eval_norm(node, traced)
        if norm is None:
            continue
        gamma, beta, mean, var, eps = norm
        producer = _producer(node.args[0])
        if producer is None:
            continue
        weight, bias = (params.movable(producer[i]) for i in (1, 2))
        if weight is None or (producer[2] is not None and bias is None):
            continue
        gamma_name = params.movable(gamma) if gamma is not None else None
        beta_name = params.movable(beta) if beta is not None else None
        if (gamma is not None and gamma_name is None) or beta_name is None:
            continue
        shape = params.shape(weight)
        if shape is None or params.shape(beta_name) != shape[:1]:
            continue
        statistics = Statistics(
            mean, var, eps, {n: buffers[n] for n in (mean, var) if n in buffers}
        )
        site = f"{weight.rpartition('.')[0]}->{beta_name.rpartition('.')[0]}"
        if gamma_name is not None:
            found.append(
                BatchNormScaling(
                    weight, bias, gamma_name, beta_name, statistics, width=shape[0], site=site
                )
            )
        if bias is not None:
            found.append(
                BatchNormShift(bias, gamma_name, beta_name, statistics, width=shape[0], site=site)
            )
    return found


def _eval_norm(node: Node, traced: TracedGraph) -> tuple[Any, Any, str, str, float] | None:
    """(γ node, β node, running mean, running variance, eps) of an evaluation-mode batch norm
    whose statistics are buffers, else ``None``."""
    name = op_name(node)
    if name == "batch_norm" and len(node.args) >= 8 and not node.args[5]:
        eps = node.args[7]
    elif name == "_native_batch_norm_legit_no_training" and len(node.args) >= 5:
        eps = node.args[6] if len(node.args) > 6 else node.kwargs.get("eps", 1e-5)
    else:
        return None
    stats = [traced.buffers.get(a.name) if isinstance(a, Node) else None for a in node.args[3:5]]
    if stats[0] is None or stats[1] is None:
        return None
    if not isinstance(eps, (int, float)):
        return None
    return node.args[1], node.args[2], stats[0], stats[1], float(eps)


def _producer(node: Any) -> tuple[Node, Any, Any] | None:
    """(node, weight, bias) of the convolution or linear map whose output reaches a norm
    through ops passing values unchanged, where nothing else reads it; else ``None``."""
    while isinstance(node, Node) and len(node.users) == 1:
        name = op_name(node)
        if name in _PASS:
            node = node.args[0]
            continue
        if name in _CONVOLUTIONS and not _transposed(node):
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            return node, node.args[1], bias
        if name == "linear" and len(_shape(node) or ()) == 2:
            bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
            return node, node.args[1], bias
        return None
    return None


def _transposed(node: Node) -> bool:
    """Whether a generic ``convolution`` op is a transposed one (its weight's axis 0 is then
    the input channels)."""
    return op_name(node) in ("convolution", "_convolution") and bool(
        node.args[6] if len(node.args) > 6 else False
    )
