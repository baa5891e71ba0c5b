"""The NTK methods that work on any model: Jacobian contraction (``method="jacobian"``, the
dense oracle) and NTK-vector products (``method="vp"``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from paramsym.core.batches import Inputs, batch_length, one_sample_batch, take
from paramsym.tangent_kernel.problem import (
    KernelProblem,
    Mode,
    allocate,
    element_size,
    finish,
    tiles,
)

_NOT_VMAPPABLE: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""Models whose forward failed under ``vmap`` over samples (e.g. ``nn.LSTM``)."""

_NO_FUNCTORCH: weakref.WeakSet[nn.Module] = weakref.WeakSet()
"""Models whose forward fails under every ``torch.func`` transform: a custom
``autograd.Function`` without ``setup_context`` (BLOOM's GELU)."""


def is_functorch_refusal(error: RuntimeError) -> bool:
    """Whether ``error`` is torch.func refusing a custom ``autograd.Function``."""
    return "autograd.Function with functorch transforms" in str(error)


def _autograd_jacobian(
    single: Callable[[dict[str, Tensor], Inputs], Tensor],
    free: dict[str, Tensor],
    sample: Inputs,
) -> dict[str, Tensor]:
    """``jacrev(single)(free, sample)`` by plain reverse-mode autograd, one output at a time
    (for forwards that ``torch.func`` cannot transform)."""
    names = list(free)
    leaves = [free[k].detach().requires_grad_(True) for k in names]
    with torch.enable_grad():
        out = single(dict(zip(names, leaves, strict=True)), sample)
        flat = out.reshape(-1)
        rows = []
        for i in range(flat.numel()):
            grads = torch.autograd.grad(flat[i], leaves, retain_graph=True, allow_unused=True)
            rows.append(
                [
                    torch.zeros_like(t) if g is None else g
                    for g, t in zip(grads, leaves, strict=True)
                ]
            )
    return {
        k: torch.stack([row[j] for row in rows]).reshape(*out.shape, *leaves[j].shape)
        for j, k in enumerate(names)
    }


def jacobians_over_samples(
    single: Callable[[dict[str, Tensor], Inputs], Tensor],
    free: dict[str, Tensor],
    x: Inputs,
    model: nn.Module,
) -> dict[str, Tensor]:
    """``jacrev(single)(free, x_i)`` for every sample, stacked: name → (b, *out, *shape).

    Vectorised with ``vmap`` over the samples; a model whose forward cannot run under ``vmap``
    (``nn.LSTM``/``nn.GRU`` in torch 2.x) gets the same Jacobians one sample at a time, and one
    that no ``torch.func`` transform runs (a custom ``autograd.Function`` without
    ``setup_context``, as BLOOM's GELU) one sample and one output at a time by autograd.
    """
    jacobian = torch.func.jacrev(single)
    if model not in _NOT_VMAPPABLE:
        try:
            jac: dict[str, Tensor] = torch.func.vmap(jacobian, in_dims=(None, 0))(free, x)
            return jac
        except RuntimeError as error:
            _NOT_VMAPPABLE.add(model)
            if is_functorch_refusal(error):
                _NO_FUNCTORCH.add(model)
    samples = [take(x, i) for i in range(batch_length(x, "jacobian", "x"))]
    if model in _NO_FUNCTORCH:
        rows = [_autograd_jacobian(single, free, sample) for sample in samples]
    else:
        rows = [jacobian(free, sample) for sample in samples]
    return {k: torch.stack([row[k] for row in rows]) for k in free}


def per_sample_jacobian(
    problem: KernelProblem, names: Sequence[str], x: Inputs
) -> dict[str, Tensor]:
    """Per-sample Jacobians of the O outputs w.r.t. parameters ``names``: name → (b, O, numel)."""
    fixed = {k: v for k, v in problem.params.items() if k not in names}

    def single(free: dict[str, Tensor], sample: Inputs) -> Tensor:
        return problem.forward({**fixed, **free}, one_sample_batch(sample))[0]

    free = {k: problem.params[k] for k in names}
    jac = jacobians_over_samples(single, free, x, problem.model)
    b = batch_length(x, "ntk", "x")
    return {k: v.reshape(b, problem.outputs, -1) for k, v in jac.items()}


def _contract(j1: Mapping[str, Tensor], j2: Mapping[str, Tensor], mode: Mode) -> Tensor:
    """Σ over parameters of the per-sample Jacobian products, in the mode's shape."""
    total: Tensor | None = None
    for name, a in j1.items():
        b = j2[name]
        if mode == "full":
            part = torch.einsum("aoq,bpq->abop", a, b)
        elif mode == "diagonal":
            part = torch.einsum("aoq,boq->abo", a, b)
        else:
            part = torch.einsum("aoq,boq->ab", a, b)
        total = part if total is None else total + part
    assert total is not None
    return total


def jacobian_kernel(
    problem: KernelProblem, names: Sequence[str], batch_size: int | None, budget: int
) -> Tensor:
    """The part of the kernel that comes from parameters ``names``, by contracting per-sample
    Jacobians tile by tile (all of it when ``names`` are all the parameters)."""
    size = sum(problem.params[n].numel() for n in names)
    per_sample = max(1, problem.outputs * size * element_size(problem))
    tile = batch_size or max(1, budget // (2 * per_sample))
    result = allocate(problem)
    for s1 in tiles(problem.n1, tile):
        j1 = per_sample_jacobian(problem, names, take(problem.x1, s1))
        for s2 in tiles(problem.n2, tile):
            same = problem.same and s1 == s2
            j2 = j1 if same else per_sample_jacobian(problem, names, take(problem.x2, s2))
            result[s1, s2] = _contract(j1, j2, problem.mode)
    return result


def vp_kernel(problem: KernelProblem, batch_size: int | None, budget: int) -> Tensor:
    """The kernel from NTK-vector products: one VJP through x2's outputs and one JVP through
    x1's per chunk of output basis vectors."""
    params = problem.params
    size = sum(p.numel() for p in params.values())
    o = problem.outputs
    chunk = max(1, budget // max(1, 2 * size * element_size(problem)))
    tile = batch_size or max(problem.n1, problem.n2)
    result = allocate(problem)
    for s2 in tiles(problem.n2, tile):
        x2 = take(problem.x2, s2)
        b2 = batch_length(x2, "ntk", "x2")
        pull = torch.func.vjp(lambda p, x2=x2: problem.forward(p, x2), params)[1]
        basis = torch.eye(b2 * o, dtype=result.dtype, device=result.device).reshape(b2 * o, b2, o)
        for s1 in tiles(problem.n1, tile):
            x1 = take(problem.x1, s1)

            def push(u: dict[str, Tensor], x1: Inputs = x1) -> Tensor:
                return torch.func.jvp(lambda p: problem.forward(p, x1), (params,), (u,))[1]

            columns = []
            for start in range(0, b2 * o, chunk):
                (u,) = torch.func.vmap(pull)(basis[start : start + chunk])
                columns.append(torch.func.vmap(push)(u))  # (chunk, b1, O)
            block = torch.cat(columns).reshape(b2, o, -1, o)  # [j, p, i, o]
            result[s1, s2] = finish(block.permute(2, 0, 3, 1), problem.mode)
    return result


__all__ = ["jacobian_kernel", "per_sample_jacobian", "vp_kernel"]
