"""Structured derivatives (``method="structured"``): the NTK of layers whose weight Jacobian
factorises, computed without forming a P-dimensional Jacobian.

A layer that computes ``y_t = W a_t + b`` at positions t (a ``Linear`` on ``(b, ..., in)``
inputs, a convolution on its input patches) has ``∂f_o/∂W = Σ_t δ_{o,t} ⊗ a_t``, where δ is the
cotangent of the layer's output for output o. Its part of the kernel is therefore

    Θ_layer[i, j, o, p] = Σ_{t,s} (a_{i,t}·a_{j,s} + 1[bias]) (δ_{o,i,t}·δ_{p,j,s}).

A grouped convolution (``groups = G``) is G such layers side by side: output channels of group g
see the input channels of group g only, so the sum runs over groups as well. An ``Embedding``
is the same with one-hot inputs: ``a_{i,t}·a_{j,s}`` becomes the co-occurrence
``1[id_{i,t} = id_{j,s}]`` of token ids (``padding_idx`` tokens excluded: torch gives its row
no gradient). The layer inputs a and the cotangents δ of all layers come from one forward with
taps and one VJP per output (vectorised).

Per layer, one of three contractions is used (the cheapest by a flop count):

* ``"vector"``: one position (plain ``Linear`` on vectors): ``(a·a′)(δ·δ′)`` as two Gram
  matrices;
* ``"pairs"``: the sum over position pairs above (long weights, few positions: sequences);
* ``"gradients"``: per-sample weight gradients ``Σ_t δ_{o,t} ⊗ a_t`` of shape (O, b, P_layer),
  then their Gram matrix (many positions, small weights: convolutions).

Covered: ``nn.Linear`` (and subclasses), :class:`~paramsym.nn.NTKLinear`, ``nn.Conv1d``,
``nn.Conv2d``, ``nn.Conv3d`` (any ``groups``, depthwise included, any stride, dilation,
``padding`` (numbers, ``"same"``, ``"valid"``) and ``padding_mode``), ``nn.Embedding`` (without
``max_norm``, ``scale_grad_by_freq`` or ``sparse``).

**Verified before use.** A layer is computed structurally only if, in one forward pass, it is
called exactly once, its input and output have the batch as their first axis (checked with
batches of one and two samples: a positional embedding applied to ``arange(T)`` is not), and on
a probe of two samples, for a random cotangent on the first sample's outputs, its structured
weight gradient equals autograd's (compared along four random rank-one directions, one pass over
the gradient; exactly for the bias) while the second sample's cotangents at the layer vanish.
This catches weights that are shared or also used outside the module's ``forward``, subclasses
with their own ``forward``, modules called through ``F.*`` by their parent
(``nn.MultiheadAttention.out_proj``) and outputs that mix samples. It costs two forward passes
and one backward pass on two samples, a fixed overhead of a few passes over the parameters.
A plain ``nn.Sequential`` of standard modules (:func:`statically_verified`) is known to pass
these checks from its structure, and skips the probe.
Every other parameter (norms, recurrent cells, attention biases, rejected layers) contributes
through the Jacobian contraction, exactly, with a :class:`StructuredFallbackWarning` that names
the modules and why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from paramsym.core.model_checks import chain_hazards
from paramsym.errors import InvalidArgumentError, ParamsymWarning
from paramsym.nn.layers import NTKLinear
from paramsym.tangent_kernel.factorised import (
    Layer,
    Path,
    candidate_layers,
    choose_path,
    input_gram,
    per_sample_gradients,
    weight_projections,
)
from paramsym.tangent_kernel.generic import jacobian_kernel
from paramsym.tangent_kernel.problem import (
    KernelProblem,
    Mode,
    allocate,
    element_size,
    tiles,
    two_samples,
)


class StructuredFallbackWarning(ParamsymWarning):
    """``method="structured"`` computed some parameters' kernel part by Jacobian contraction."""


# -- taps -----------------------------------------------------------------------------------------


def _hook_input(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
    return args[0] if args else next(iter(kwargs.values()), None)


def _record_calls(
    problem: KernelProblem, layers: Sequence[Layer], x: Tensor
) -> dict[str, list[tuple[Any, Any]]]:
    """Input and output shapes of every call of every layer in one forward on ``x``."""
    calls: dict[str, list[tuple[Any, Any]]] = {layer.name: [] for layer in layers}

    def hook(name: str) -> Callable[..., None]:
        def record(module: nn.Module, args: tuple[Any, ...], kwargs: Any, out: Any) -> None:
            inp = _hook_input(args, kwargs)
            calls[name].append(
                (
                    inp.shape if isinstance(inp, Tensor) else None,
                    out.shape if isinstance(out, Tensor) else None,
                )
            )

        return record

    handles = [
        layer.module.register_forward_hook(hook(layer.name), with_kwargs=True) for layer in layers
    ]
    try:
        with torch.no_grad():
            problem.forward(problem.params, x)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _tapped(
    problem: KernelProblem,
    layers: Sequence[Layer],
    params: Mapping[str, Tensor],
    x: Tensor,
    eps: Mapping[str, Tensor],
) -> tuple[Tensor, dict[str, Tensor]]:
    """The forward with ``eps[name]`` added to each layer's output; also returns the inputs."""
    captured: dict[str, Tensor] = {}

    def hook(name: str) -> Callable[..., Tensor]:
        def add_tap(module: nn.Module, args: tuple[Any, ...], kwargs: Any, out: Tensor) -> Tensor:
            captured[name] = _hook_input(args, kwargs).clone()  # safe from later in-place ops
            return out + eps[name]

        return add_tap

    handles = [
        layer.module.register_forward_hook(hook(layer.name), with_kwargs=True) for layer in layers
    ]
    try:
        return problem.forward(params, x), captured
    finally:
        for handle in handles:
            handle.remove()


def _zeros(
    problem: KernelProblem, shapes: Mapping[str, tuple[torch.Size, torch.Size]], batch: int
) -> dict[str, Tensor]:
    ref = next(iter(problem.params.values()))
    return {
        name: torch.zeros((batch, *out), dtype=ref.dtype, device=ref.device)
        for name, (_, out) in shapes.items()
    }


def _taps(
    problem: KernelProblem,
    layers: Sequence[Layer],
    shapes: Mapping[str, tuple[torch.Size, torch.Size]],
    x: Tensor,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Layer inputs ``a`` (name → captured input) and output cotangents ``δ`` (name → (O, b, …))."""

    def tapped(eps: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        return _tapped(problem, layers, problem.params, x, eps)

    zeros = _zeros(problem, shapes, x.shape[0])
    _, pull, inputs = torch.func.vjp(tapped, zeros, has_aux=True)  # type: ignore[misc]
    o = problem.outputs
    ref = next(iter(zeros.values()))
    basis = torch.eye(o, dtype=ref.dtype, device=ref.device).unsqueeze(1).expand(o, x.shape[0], o)
    (deltas,) = torch.func.vmap(pull)(basis)
    return {k: v.detach() for k, v in inputs.items()}, deltas


# -- per-layer contractions -----------------------------------------------------------------------


def _represent(layer: Layer, path: Path, captured: Tensor, delta: Tensor) -> tuple[Tensor, ...]:
    """What one tile keeps of a layer for its contractions with other tiles."""
    a, d = layer.features(captured), layer.cotangents(delta)
    if path == "vector":
        return a[:, 0, 0], d[:, :, 0, 0]  # (b, K), (O, b, C)
    if path == "pairs":
        return a, d
    return (per_sample_gradients(layer, a, d),)


_SYMMETRIC_LEAF_ROWS = 512
"""Row count below which :func:`_gram` multiplies a symmetric block in one matmul."""


def _gram(u: Tensor, v: Tensor) -> Tensor:
    """``u @ v.T`` for ``(r, k)`` matrices; when ``u is v`` only the blocks on and above the
    diagonal are multiplied (recursively; 3/4 of the work at 640 rows) and mirrored."""
    rows = u.shape[0]
    if u is not v or rows < _SYMMETRIC_LEAF_ROWS:
        return u @ v.T
    half = rows // 2
    top, bottom = u[:half], u[half:]
    result = torch.empty((rows, rows), dtype=u.dtype, device=u.device)
    result[:half, :half] = _gram(top, top)
    result[half:, half:] = _gram(bottom, bottom)
    off = top @ bottom.T
    result[:half, half:] = off
    result[half:, :half] = off.T
    return result


def _accumulate(
    block: Tensor,
    layer: Layer,
    path: Path,
    r1: tuple[Tensor, ...],
    r2: tuple[Tensor, ...],
    mode: Mode,
) -> None:
    """Add one layer's kernel block to ``block``, laid out ``(O, b1, O, b2)`` for ``"full"``,
    ``(O, b1, b2)`` for ``"diagonal"``, ``(b1, b2)`` for ``"trace"``."""
    same = r1 is r2
    if path == "vector":  # (a·a′)(δ·δ′)
        (a1, u), (a2, v) = r1, r2
        gram_a = layer.weight_scale**2 * (a1 @ a2.T)
        if layer.bias is not None:
            gram_a = gram_a + layer.bias_scale**2
        if mode == "full":
            rows_u = u.reshape(-1, u.shape[-1])
            rows_v = rows_u if same else v.reshape(-1, v.shape[-1])
            gram_d = _gram(rows_u, rows_v).view(block.shape)
            block.addcmul_(gram_d, gram_a[None, :, None, :])
            return
        gram_diag = torch.bmm(u, v.transpose(1, 2))  # (O, b1, b2)
        block.addcmul_(gram_diag if mode == "diagonal" else gram_diag.sum(0), gram_a)
        return
    if path == "pairs":  # Σ over pairs of positions t, s
        (a1, d1), (a2, d2) = r1, r2
        gram_a = input_gram(layer, a1, a2, block.dtype)
        if mode == "full":
            block += torch.einsum("ijgts,oigtc,pjgsc->oipj", gram_a, d1, d2)
        elif mode == "diagonal":
            block += torch.einsum("ijgts,oigtc,ojgsc->oij", gram_a, d1, d2)
        else:
            block += torch.einsum("ijgts,oigtc,ojgsc->ij", gram_a, d1, d2)
        return
    (g1,), (g2,) = r1, r2  # per-sample gradients (O, b, P)
    if mode == "full":
        rows1 = g1.reshape(-1, g1.shape[-1])
        rows2 = rows1 if same else g2.reshape(-1, g2.shape[-1])
        block += _gram(rows1, rows2).view(block.shape)
        return
    products = torch.bmm(g1, g2.transpose(1, 2))  # (O, b1, b2)
    block += products if mode == "diagonal" else products.sum(0)


def _contraction_block(o: int, b1: int, b2: int, mode: Mode, like: Tensor) -> Tensor:
    shape = {"full": (o, b1, o, b2), "diagonal": (o, b1, b2), "trace": (b1, b2)}[mode]
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


def _to_kernel_layout(block: Tensor, mode: Mode) -> Tensor:
    """``(O, b1, O, b2)`` → ``(b1, b2, O, O)``; ``(O, b1, b2)`` → ``(b1, b2, O)``."""
    if mode == "full":
        return block.permute(1, 3, 0, 2)
    if mode == "diagonal":
        return block.permute(1, 2, 0)
    return block


# -- the plan -------------------------------------------------------------------------------------


@dataclass
class StructuredPlan:
    """Which layers are computed structurally, and how.

    Attributes:
        layers: verified layers.
        paths: layer name → contraction (``"vector"``, ``"pairs"`` or ``"gradients"``).
        shapes: layer name → per-sample (input, output) shapes.
        rest: parameter names left for the Jacobian contraction.
        reasons: module name → why a module of a supported type is not computed structurally.
    """

    layers: list[Layer]
    paths: dict[str, Path]
    shapes: dict[str, tuple[torch.Size, torch.Size]]
    rest: list[str]
    reasons: dict[str, str] = field(default_factory=dict)


def _batched(calls: Mapping[str, list[tuple[Any, Any]]], name: str, batch: int) -> str | None:
    """Why the single call of layer ``name`` does not have ``batch`` leading rows (or None)."""
    made = calls[name]
    if len(made) != 1:
        return f"is called {len(made)} times in one forward"
    inputs, outputs = made[0]
    if inputs is None or outputs is None:
        return "is not called with one tensor input"
    if len(inputs) == 0 or inputs[0] != batch or len(outputs) == 0 or outputs[0] != batch:
        return "gets an input without a leading batch axis (e.g. shared positions)"
    return None


_VERIFY_ELEMENTS = 1 << 22
"""Parameters whose gradients one verification pass may hold (at least the largest layer's)."""


def _passes(layers: Sequence[Layer], params: Mapping[str, Tensor]) -> list[list[Layer]]:
    """Layers grouped so that one pass's parameter gradients stay under the cap."""
    sizes = [sum(params[n].numel() for n in layer.names) for layer in layers]
    cap = max([_VERIFY_ELEMENTS, *sizes])
    groups: list[list[Layer]] = [[]]
    held = 0
    for layer, size in zip(layers, sizes, strict=True):
        if groups[-1] and held + size > cap:
            groups.append([])
            held = 0
        groups[-1].append(layer)
        held += size
    return groups


_PROBES = 4
"""Random rank-one directions along which verification compares weight gradients."""


def _mismatch(
    layer: Layer, a: Tensor, d: Tensor, truth: Mapping[str, Tensor], generator: torch.Generator
) -> float:
    """Relative difference between the structured gradient of one sample (features ``a``,
    cotangents ``d`` as ``(1, 1, G, T, C)``) and autograd's ``truth`` (name → gradient): along
    random rank-one directions ``r sᵀ`` for the weight (one pass over its gradient; a
    difference D ≠ 0 shows with probability one), exactly for the bias."""
    weight = truth[layer.weight].reshape(truth[layer.weight].shape[0], -1)
    r = torch.randn((weight.shape[0], _PROBES), generator=generator, dtype=weight.dtype)
    s = torch.randn((weight.shape[1], _PROBES), generator=generator, dtype=weight.dtype)
    r, s = r.to(weight.device), s.to(weight.device)
    expected = ((weight @ s) * r).sum(0)
    mine = weight_projections(layer, a[0], d[0, 0], r, s)
    error = float(((mine - expected) ** 2).sum())
    scale = max(float((expected**2).sum()), float((mine**2).sum()))
    if layer.bias is not None:
        bias = layer.bias_scale * d[0, 0].sum(1).reshape(-1)
        error += float(((bias - truth[layer.bias]) ** 2).sum())
        scale += float((truth[layer.bias] ** 2).sum())
    if scale == 0.0:
        return 0.0
    return (error / scale) ** 0.5


def _short(error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"cannot be checked: torch.func fails on the forward ({first[:160]})"


def _verify(
    problem: KernelProblem,
    layers: Sequence[Layer],
    shapes: Mapping[str, tuple[torch.Size, torch.Size]],
    x: Tensor,
) -> dict[str, str]:
    """Layers whose structured gradient differs from autograd's on the probe ``x`` (2 samples),
    for a random cotangent on the first sample's outputs: name → reason. The second sample's
    cotangents at the layer must vanish (no mixing of samples)."""
    generator = torch.Generator().manual_seed(0)
    dtype = next(iter(problem.params.values())).dtype  # inputs may be token ids
    tol = min(1e4 * torch.finfo(dtype).eps, 0.05)
    failed: dict[str, str] = {}
    u: Tensor | None = None
    for group in _passes(layers, problem.params):
        sub = {n: problem.params[n] for layer in group for n in layer.names}

        def tapped(
            eps: dict[str, Tensor], free: dict[str, Tensor], group: list[Layer] = group
        ) -> tuple[Tensor, dict[str, Tensor]]:
            return _tapped(problem, group, {**problem.params, **free}, x, eps)

        zeros = _zeros(problem, {layer.name: shapes[layer.name] for layer in group}, x.shape[0])
        try:
            out, pull, captured = torch.func.vjp(tapped, zeros, sub, has_aux=True)  # type: ignore[misc]
        except RuntimeError as error:  # torch.func refuses the forward (a custom autograd.Function)
            failed.update(dict.fromkeys((layer.name for layer in group), _short(error)))
            continue
        if u is None:
            u = torch.randn(out.shape, generator=generator, dtype=out.dtype).to(out.device)
            u[1:] = 0.0  # only the first sample
        d_eps, truth = pull(u)
        for layer in group:
            a = layer.features(captured[layer.name].detach())
            d = layer.cotangents(d_eps[layer.name].unsqueeze(0))  # (1, 2, G, T, C)
            difference = _mismatch(layer, a, d, truth, generator)
            leak = float(d[0, 1:].norm()) / max(float(d[0, 0].norm()), 1e-300)
            if difference > tol or leak > tol:
                failed[layer.name] = (
                    "has a weight gradient that the layer's input and output do not explain "
                    "(the weight is also used elsewhere, the forward is not the standard one, "
                    f"or samples mix; relative difference {max(difference, leak):.1e})"
                )
        del truth, d_eps, pull
    return failed


_STANDARD_LEAVES = (
    nn.Linear,
    NTKLinear,
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.Embedding,
    nn.Flatten,
    nn.Identity,
    nn.Dropout,
    nn.LayerNorm,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
)


def statically_verified(model: nn.Module) -> bool:
    """Whether the structure alone guarantees what :func:`_verify` checks numerically: an
    ``nn.Sequential`` (nested ones included) of distinct modules of standard types (exactly
    those types, not subclasses with their own ``forward``; activations of the registry),
    no weight shared or parametrised, no BatchNorm in training mode. Its forward calls each
    layer once, on batch-first inputs, with the layer's own weight, and never mixes samples;
    the probe is then skipped (it costs two forwards and a VJP)."""
    from paramsym.nn.activations import activation_spec

    if not isinstance(model, nn.Sequential) or any(
        h.kind != "eval_batchnorm" for h in chain_hazards(model)
    ):
        return False
    for module in model.modules():
        if type(module) is nn.Sequential:
            continue
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            return False
        if type(module) not in _STANDARD_LEAVES and activation_spec(module) is None:
            return False
    return True


def _tensor_inputs(problem: KernelProblem) -> tuple[Tensor, Tensor]:
    """x1 and x2 as tensors: the per-layer factorisation reads layer inputs off one tensor
    batch (:func:`~paramsym.tangent_kernel.ntk` refuses keyword inputs here)."""
    if not isinstance(problem.x1, Tensor) or not isinstance(problem.x2, Tensor):
        raise InvalidArgumentError(
            "ntk(method='structured'): the per-layer factorisation takes a tensor input; with "
            "keyword inputs use method='auto', 'jacobian' or 'vp'"
        )
    return problem.x1, problem.x2


def plan_structured(problem: KernelProblem) -> StructuredPlan:
    """Choose and verify the layers computed structurally (module docstring)."""
    layers, reasons = candidate_layers(problem.model, problem.params)
    if layers:
        probe = two_samples(_tensor_inputs(problem)[0])
        assert isinstance(probe, Tensor)
        static = statically_verified(problem.model)
        calls_two = _record_calls(problem, layers, probe)
        calls_one = calls_two if static else _record_calls(problem, layers, probe[:1])
        kept = []
        for layer in layers:
            why = None if static else _batched(calls_one, layer.name, 1)
            why = why or _batched(calls_two, layer.name, 2)
            if why is None:
                kept.append(layer)
            else:
                reasons[layer.name or "(root)"] = why
        shapes = {
            layer.name: (calls_two[layer.name][0][0][1:], calls_two[layer.name][0][1][1:])
            for layer in kept
        }
        failed = _verify(problem, kept, shapes, probe) if kept and not static else {}
        for name, why in failed.items():
            reasons[name or "(root)"] = why
        layers = [layer for layer in kept if layer.name not in failed]
    else:
        shapes = {}
    shapes = {layer.name: shapes[layer.name] for layer in layers}
    covered = {n for layer in layers for n in layer.names}
    rest = [k for k in problem.params if k not in covered]
    paths = {
        layer.name: choose_path(layer, *shapes[layer.name], problem.outputs) for layer in layers
    }
    return StructuredPlan(layers, paths, shapes, rest, reasons)


def _tile_size(problem: KernelProblem, plan: StructuredPlan, budget: int) -> int:
    """Largest tile whose inputs, cotangents and per-layer blocks fit in ``budget`` bytes."""
    if not plan.layers:
        return max(problem.n1, problem.n2)
    o = problem.outputs
    per_sample, pair = 0, o * o
    for layer in plan.layers:
        g, t, k, c, p = layer.sizes(*plan.shapes[layer.name])
        path = plan.paths[layer.name]
        per_sample += (t if layer.kind == "embedding" else g * t * k) + o * g * t * c
        if path == "gradients":
            per_sample += o * p
        elif path == "pairs":
            pair = max(pair, o * o + g * t * t + g * t * o * c)
    element = element_size(problem)
    tile = 1
    while tile < 4096 and element * (4 * tile * per_sample + 2 * tile * tile * pair) <= budget:
        tile *= 2
    return max(1, tile // 2) if tile > 1 else 1


def _warn_fallback(plan: StructuredPlan) -> None:
    modules = sorted({k.rsplit(".", 1)[0] if "." in k else "(root)" for k in plan.rest})
    why = "".join(
        f"; '{name}' {reason}" for name, reason in plan.reasons.items() if name in modules
    )
    warnings.warn(
        f"ntk(method='structured'): {len(plan.rest)} parameter tensor(s) of {modules[:6]} are "
        "not in layers with a structured kernel (Linear, Conv1d/2d/3d, Embedding); their part of "
        f"the kernel uses the Jacobian contraction (exact, slower){why}",
        StructuredFallbackWarning,
        stacklevel=4,
    )


def structured_kernel(
    problem: KernelProblem, plan: StructuredPlan, batch_size: int | None, budget: int
) -> Tensor:
    """The kernel: verified layers structurally, every other parameter by Jacobians."""
    if plan.rest:
        _warn_fallback(plan)
    result = (
        allocate(problem)
        if not plan.rest
        else jacobian_kernel(problem, plan.rest, batch_size, budget)
    )
    if not plan.layers:
        return result
    layers = plan.layers
    tile = batch_size or _tile_size(problem, plan, budget)

    def represent(x: Tensor) -> dict[str, tuple[Tensor, ...]]:
        inputs, deltas = _taps(problem, layers, plan.shapes, x)
        return {
            layer.name: _represent(
                layer, plan.paths[layer.name], inputs[layer.name], deltas[layer.name]
            )
            for layer in layers
        }

    x1, x2 = _tensor_inputs(problem)
    for s1 in tiles(problem.n1, tile):
        f1 = represent(x1[s1])
        for s2 in tiles(problem.n2, tile):
            f2 = f1 if problem.same and s1 == s2 else represent(x2[s2])
            block = _contraction_block(
                problem.outputs, s1.stop - s1.start, s2.stop - s2.start, problem.mode, result
            )
            for layer in layers:
                _accumulate(
                    block,
                    layer,
                    plan.paths[layer.name],
                    f1[layer.name],
                    f2[layer.name],
                    problem.mode,
                )
            result[s1, s2] += _to_kernel_layout(block, problem.mode)
    return result


__all__ = [
    "StructuredFallbackWarning",
    "StructuredPlan",
    "plan_structured",
    "structured_kernel",
]
