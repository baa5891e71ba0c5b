"""Hessian-vector products by reverse over forward mode, and where forward mode cannot be
trusted (``ps.hvp(..., method="reverse_over_forward")``, :mod:`paramsym.curvature`).

⟨∇L, v⟩ is computed by ``torch.func.jvp`` and differentiated in reverse: no P-sized gradient is
formed, and the products cost about 8 matrix products per linear layer against
reverse-over-reverse's 9 (2.8 against 3.2-3.4 gradients on GPT-2-small and BERT-base, one
thread). Forward mode departs from reverse mode silently in places, so the method refuses
graphs with autograd nodes outside a vetted list (:data:`VETTED_NODES`), rewrites the fused
norms (:class:`_ElementaryNorms`), and runs inside
:func:`~paramsym.core.backends.differentiable_attention` (embedding padding rows,
pytorch/pytorch#93950). It still ignores ``torch.no_grad`` blocks inside a model
(pytorch/pytorch#128600), which is why ``method="auto"`` does not take it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional
from torch.overrides import TorchFunctionMode

from paramsym.core.params import Params
from paramsym.errors import AutodiffError


def _layer_norm(
    x: Tensor,
    normalized_shape: Any,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    centred = x - x.mean(dims, keepdim=True)
    out = centred * torch.rsqrt(centred.square().mean(dims, keepdim=True) + eps)
    out = out * weight if weight is not None else out
    return out + bias if bias is not None else out


def _rms_norm(
    x: Tensor, normalized_shape: Any, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    dims = tuple(range(-len(tuple(normalized_shape)), 0))
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    out = x * torch.rsqrt(x.square().mean(dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


_ELEMENTARY_NORMS: dict[Any, Callable[..., Tensor]] = {
    functional.layer_norm: _layer_norm,
    functional.rms_norm: _rms_norm,
}


class _ElementaryNorms(TorchFunctionMode):
    """``F.layer_norm`` and ``F.rms_norm`` written with elementary ops (float32/64 inputs).

    The fused kernels' forward-mode formulas read the mean and 1/σ the kernel saved, outputs
    that reverse mode treats as constants: differentiating the tangent in reverse misses their
    dependence on θ, silently (torch 2.13: 13 % relative error on GPT-2's biases). Written
    out, every op is differentiated exactly.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        replacement = _ELEMENTARY_NORMS.get(func)
        if (
            replacement is not None
            and args
            and isinstance(args[0], Tensor)
            and args[0].dtype in (torch.float32, torch.float64)
        ):
            return replacement(*args, **kwargs)
        return func(*args, **kwargs)


# Autograd nodes whose forward-mode formula reverse mode differentiates exactly (functorch's
# out-of-place formulas, no saved non-differentiable outputs); each one occurs in a model of
# the tests that compare reverse-over-forward with reverse-over-reverse. A graph with any other
# node (a fused norm, batch norm, a custom autograd.Function, ...) takes reverse-over-reverse.
VETTED_NODES = frozenset(
    {
        "AccumulateGrad",
        "AddBackward0",
        "AddBackward1",
        "AddmmBackward0",
        "AliasBackward0",
        "AmaxBackward0",
        "BmmBackward0",
        "CatBackward0",
        "CloneBackward0",
        "ConstantPadNdBackward0",
        "ConvolutionBackward0",
        "CopyBackwards",
        "DivBackward0",
        "DivBackward1",
        "EluBackward0",
        "EluBackwardBackward0",
        "EmbeddingBackward0",
        "ExpBackward0",
        "ExpandBackward0",
        "GeluBackward0",
        "GeluBackwardBackward0",
        "IndexBackward0",
        "LeakyReluBackward0",
        "LeakyReluBackwardBackward0",
        "MeanBackward0",
        "MeanBackward1",
        "MmBackward0",
        "MseLossBackwardBackward0",
        "MulBackward0",
        "MulBackward1",
        "NegBackward0",
        "NllLossBackward0",
        "PermuteBackward0",
        "PowBackward0",
        "ReluBackward0",
        "RsqrtBackward0",
        "SafeSoftmaxBackward0",
        "SelectBackward0",
        "SigmoidBackward0",
        "SigmoidBackwardBackward0",
        "SiluBackward0",
        "SliceBackward0",
        "SoftplusBackward0",
        "SoftplusBackwardBackward0",
        "SplitBackward0",
        "SqueezeBackward1",
        "SubBackward0",
        "SumBackward1",
        "TBackward0",
        "TanhBackward0",
        "TanhBackwardBackward0",
        "ThresholdBackwardBackward0",
        "ToCopyBackward0",
        "TransposeBackward0",
        "UnsafeViewBackward0",
        "UnsqueezeBackward0",
        "ViewBackward0",
        "WhereBackward0",
    }
)


def unvetted_nodes(output: Tensor) -> set[str]:
    """Names of the autograd nodes behind ``output`` that are not in :data:`VETTED_NODES`."""
    unvetted: set[str] = set()
    seen: set[Any] = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if name not in VETTED_NODES:
            unvetted.add(name)
        stack.extend(child for child, _ in node.next_functions)
    return unvetted


class UnvettedGraphError(Exception):
    def __init__(self, names: set[str]) -> None:
        super().__init__(", ".join(sorted(names)))
        self.names = names


def hvp_reverse_over_forward(
    loss: Callable[[Params], Tensor], v: Mapping[str, Tensor], point: Params
) -> Params:
    """∇⟨∇L, v⟩ at ``point`` with ⟨∇L, v⟩ computed in forward mode (``loss``: θ ↦ L(θ));
    raises :class:`UnvettedGraphError` (before any backward pass) when the graph holds a node
    outside :data:`VETTED_NODES`."""
    tangents = {k: v[k].to(t.dtype) for k, t in point.items()}

    def directional_derivative(p: Params) -> Tensor:
        with _ElementaryNorms():
            derivative = torch.func.jvp(loss, (p,), (tangents,))[1]
        unvetted = unvetted_nodes(derivative)
        if unvetted:
            raise UnvettedGraphError(unvetted)
        return derivative

    product = torch.func.grad(directional_derivative)(point)
    return {k: product[k].detach() for k in point}


def raise_without_forward_mode(err: RuntimeError, method: str) -> None:
    """Re-raise PyTorch's refusals to run the model in forward mode as AutodiffError."""
    text = str(err)
    if "setup_context" in text or "forward AD" in text:
        raise AutodiffError(
            f"hvp(method={method!r}): PyTorch cannot run this model in forward mode (a custom "
            "autograd.Function without a forward-mode rule, e.g. BLOOM's, or an op without "
            f"one): {text.splitlines()[0]}; use method='reverse_over_reverse'"
        ) from err
