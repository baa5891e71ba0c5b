"""The empirical neural tangent kernel Θ(x, x′) = J(x) J(x′)ᵀ, three ways.

For a model with O outputs per sample (the output flattened after the batch axis) and
parameters θ ∈ R^P, ``ntk(model, x1, x2)`` returns

* ``mode="full"``: Θ[i, j, o, p] = ⟨∂f_o(x1_i)/∂θ, ∂f_p(x2_j)/∂θ⟩, shape ``(n1, n2, O, O)``;
* ``mode="trace"``: Σ_o Θ[i, j, o, o], shape ``(n1, n2)``;
* ``mode="diagonal"``: Θ[i, j, o, o], shape ``(n1, n2, O)``.

No learning rate is folded in (seed 000 puts η inside Θ; multiply by it if you need that).
The kernel is defined per sample, so models whose outputs mix samples (training-mode BatchNorm)
are refused. A model whose forward returns a tuple or a ``ModelOutput`` needs ``output=`` to say
which tensor is f (:mod:`paramsym.tangent_kernel.outputs`).

Methods (``method=``), as in neural-tangents (Novak et al. 2022):

``"jacobian"``
    Per-sample Jacobians ``vmap(jacrev)`` for a tile of samples, contracted parameter by
    parameter. Memory: O·P numbers per sample in the tile. The dense reference.
``"vp"``
    NTK-vector products: Θ applied to output basis vectors with one VJP (through x2's outputs)
    and one JVP (through x1's), chunked over the basis. Never forms a Jacobian larger than a
    chunk of basis vectors times P.
``"structured"``
    For ``nn.Linear``, :class:`~paramsym.nn.NTKLinear`, ``nn.Conv1d/2d/3d`` (any ``groups``,
    depthwise included; any stride, dilation, padding and padding mode) and ``nn.Embedding`` the
    Jacobian of output o with respect to the weight is Σ_t δ_{o,t} ⊗ a_t (output cotangent
    times layer input, summed over sequence positions or convolution patches; for an embedding a
    is the one-hot token), so each layer contributes Σ_{t,s} (a_t·a′_s)(δ_{o,t}·δ′_{p,s}) — for
    an embedding the co-occurrence of token ids times the cotangent inner products — and the
    P-dimensional Jacobian is never formed (:mod:`paramsym.tangent_kernel.structured`). The
    cotangents of all layers come from one VJP per output (vectorised). A layer is used only
    after checking, on two samples, that it is called once per forward on batched inputs and
    that its structured gradient equals autograd's (so weights shared or also used outside the
    module, custom forwards and positional embeddings of ``arange(T)`` are caught). Parameters
    of other modules or of rejected layers fall back to ``"jacobian"`` on those parameters
    alone, with one :class:`StructuredFallbackWarning` naming them and why.
``"auto"``
    ``"structured"`` when verified layers hold at least half of the parameters; else
    ``"jacobian"`` when one sample's Jacobian (O·P numbers) fits in the memory budget; else
    ``"vp"``. (``"vp"`` needs forward-mode autodiff, which some ops lack, e.g. the CPU flash
    kernel of ``F.scaled_dot_product_attention`` in torch 2.x: then it raises
    :class:`~paramsym.errors.AutodiffError` and ``method="jacobian"`` is the way.)

Tiling: the samples of x1 and x2 are processed in tiles of ``batch_size`` (default: the largest
that keeps the intermediates of one tile pair under ``memory_budget`` bytes), so the kernel of a
large data set is computed in bounded memory; only the result has to fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from paramsym.core.backends import differentiable_attention
from paramsym.core.batches import Inputs
from paramsym.errors import AutodiffError, InvalidArgumentError, ShapeError
from paramsym.tangent_kernel.factorised import Layer, candidate_layers, structured_share
from paramsym.tangent_kernel.generic import is_functorch_refusal, jacobian_kernel, vp_kernel
from paramsym.tangent_kernel.outputs import OutputSelector
from paramsym.tangent_kernel.problem import DEFAULT_MEMORY_BUDGET, Mode, prepare
from paramsym.tangent_kernel.structured import (
    StructuredFallbackWarning,
    StructuredPlan,
    plan_structured,
    structured_kernel,
)

Method = Literal["auto", "jacobian", "vp", "structured"]


def _by_size(
    params: Mapping[str, Tensor], layers: Sequence[Layer], outputs: int, budget: int
) -> Method:
    if layers and structured_share(params, layers) >= 0.5:
        return "structured"
    total = sum(p.numel() for p in params.values())
    element = next(iter(params.values())).element_size()
    return "jacobian" if outputs * total * element <= budget else "vp"


def choose_method(
    model: nn.Module,
    params: Mapping[str, Tensor],
    outputs: int,
    budget: int = DEFAULT_MEMORY_BUDGET,
    *,
    x: Tensor | None = None,
    output: OutputSelector = None,
) -> Method:
    """The method ``method="auto"`` uses (see the module docstring for the rule).

    Without ``x`` the structured share counts every parameter of a supported layer type; with
    an example batch ``x`` (and the model's ``output=`` selector) only the layers that pass the
    structured path's checks, as :func:`ntk` does.
    """
    layers, _ = candidate_layers(model, params)
    if x is not None and _by_size(params, layers, outputs, budget) == "structured":
        problem = prepare(model, x, None, "trace", params, None, output)
        with torch.no_grad():
            layers = plan_structured(problem).layers
    return _by_size(params, layers, outputs, budget)


def ntk(
    model: nn.Module,
    x1: Inputs,
    x2: Inputs | None = None,
    *,
    mode: Mode = "full",
    method: Method = "auto",
    params: Mapping[str, Tensor] | None = None,
    batch_size: int | None = None,
    dtype: torch.dtype | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    output: OutputSelector = None,
) -> Tensor:
    """The empirical NTK of ``model`` between ``x1`` and ``x2`` (default ``x1``).

    Args:
        model: any module whose outputs depend on their own sample only.
        x1, x2: inputs ``(n1, ...)`` and ``(n2, ...)`` with the same trailing shape (floats, or
            int64 token ids for models with an ``nn.Embedding``), or mappings of keyword
            inputs whose tensors have the batch axis first (``{"input_ids": ids,
            "attention_mask": mask}`` or a ``BatchEncoding`` for a Hugging Face model; then
            the method is ``"jacobian"`` or ``"vp"``).
        mode: ``"full"`` → ``(n1, n2, O, O)``, ``"trace"`` → ``(n1, n2)``,
            ``"diagonal"`` → ``(n1, n2, O)``; O is the number of outputs per sample (the
            selected output flattened after the batch axis).
        method: ``"auto"`` (default), ``"jacobian"`` (dense reference), ``"vp"`` (NTK-vector
            products) or ``"structured"`` (per-layer factorisation); see the module docstring.
        params: point θ (default: the model's parameters).
        batch_size: samples per tile of x1 and x2 (default: chosen from ``memory_budget``).
        dtype: compute in this dtype (parameters and floating inputs are cast).
        memory_budget: bytes of intermediates per tile pair when ``batch_size`` is not given.
        output: which tensor of the forward's return value is f. ``None`` (default): the
            forward must return a tensor ``(batch, ...)``, else
            :class:`~paramsym.errors.InvalidArgumentError`; an ``int`` indexes a returned tuple
            (``output=0`` for ``nn.LSTM``'s ``(output, (h_n, c_n))``); a ``str`` names a key or
            attribute (``output="last_hidden_state"`` for a Hugging Face ``ModelOutput``); a
            callable maps the raw return value to a tensor. The selected tensor keeps the batch
            axis first.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 8, 2], activation="tanh", seed=0).double()
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> ps.ntk(model, x).shape, ps.ntk(model, x, mode="trace").shape
    (torch.Size([5, 5, 2, 2]), torch.Size([5, 5]))
    >>> lstm = torch.nn.LSTM(2, 3, batch_first=True).double()
    >>> ps.ntk(lstm, torch.randn(4, 5, 2, dtype=torch.float64), output=0, mode="trace").shape
    torch.Size([4, 4])
    """
    if method not in ("auto", "jacobian", "vp", "structured"):
        raise InvalidArgumentError(
            f"ntk: method must be 'auto', 'jacobian', 'vp' or 'structured', got {method!r}"
        )
    if batch_size is not None and batch_size < 1:
        raise InvalidArgumentError(f"ntk: batch_size must be >= 1, got {batch_size}")
    problem = prepare(model, x1, x2, mode, params, dtype, output)
    plan: StructuredPlan | None = None
    # torch.func transforms ignore an outer no_grad; it only stops graphs of the contractions.
    # Attention runs its math kernel: the fused CPU ones have no forward AD and no vmap rule.
    with torch.no_grad(), differentiable_attention(model):
        if method == "auto":
            static = (
                [] if isinstance(problem.x1, dict) else candidate_layers(model, problem.params)[0]
            )
            method = _by_size(problem.params, static, problem.outputs, memory_budget)
            if method == "structured":
                plan = plan_structured(problem)
                method = _by_size(problem.params, plan.layers, problem.outputs, memory_budget)
        if method == "jacobian":
            return jacobian_kernel(problem, list(problem.params), batch_size, memory_budget)
        if method == "vp":
            try:
                return vp_kernel(problem, batch_size, memory_budget)
            except (NotImplementedError, RuntimeError) as error:
                if isinstance(error, RuntimeError) and not is_functorch_refusal(error):
                    raise
                reason = str(error).splitlines()[0]
                raise AutodiffError(
                    f"ntk(method='vp'): forward-mode autodiff fails on {type(model).__name__} "
                    f"({reason}); pass method='jacobian' or method='structured'"
                ) from error
        plan = plan if plan is not None else plan_structured(problem)
        return structured_kernel(problem, plan, batch_size, memory_budget)


def kernel_matrix(kernel: Tensor) -> Tensor:
    """A full ``(n1, n2, O, O)`` kernel as the ``(n1·O, n2·O)`` Gram matrix with rows (i, o)
    (seed 000 Eq. 38's layout)."""
    if kernel.ndim != 4:
        raise ShapeError(
            f"kernel_matrix: expected a full (n1, n2, O, O) kernel, got {tuple(kernel.shape)}"
        )
    n1, n2, o, p = kernel.shape
    return kernel.permute(0, 2, 1, 3).reshape(n1 * o, n2 * p)


__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "Method",
    "StructuredFallbackWarning",
    "choose_method",
    "kernel_matrix",
    "ntk",
]
