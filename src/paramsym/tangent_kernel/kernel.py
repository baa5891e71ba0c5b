"""The empirical neural tangent kernel Θ(x, x′) = J(x) J(x′)ᵀ, three ways.

For a model with O outputs per sample (the output flattened after the batch axis) and
parameters θ ∈ R^P, ``ntk(model, x1, x2)`` returns

* ``mode="full"``: Θ[i, j, o, p] = ⟨∂f_o(x1_i)/∂θ, ∂f_p(x2_j)/∂θ⟩, shape ``(n1, n2, O, O)``;
* ``mode="trace"``: Σ_o Θ[i, j, o, o], shape ``(n1, n2)``;
* ``mode="diagonal"``: Θ[i, j, o, o], shape ``(n1, n2, O)``.

No learning rate is folded in (seed 000 puts η inside Θ; multiply by it if you need that).
The kernel is defined per sample, so models whose outputs mix samples (training-mode BatchNorm)
are refused.

Methods (``method=``), as in neural-tangents (Novak et al. 2022):

``"jacobian"``
    Per-sample Jacobians ``vmap(jacrev)`` for a tile of samples, contracted parameter by
    parameter. Memory: O·P numbers per sample in the tile.
``"vp"``
    NTK-vector products: Θ applied to output basis vectors with one VJP (through x2's outputs)
    and one JVP (through x1's), chunked over the basis. Never forms a Jacobian larger than a
    chunk of basis vectors times P.
``"structured"``
    For ``nn.Linear``/:class:`~paramsym.nn.NTKLinear`/``nn.Conv2d`` (groups = 1) the Jacobian of
    output o with respect to the weight is δ_o ⊗ a (output cotangent times layer input), so each
    layer contributes ``(a·a′)(δ_o·δ′_p)`` (summed over positions for sequence inputs or
    convolution patches) and the P-dimensional Jacobian is never formed. The cotangents of all
    layers come from one VJP per output (vectorised). Parameters of other modules, or shared
    between modules, fall back to ``"jacobian"`` on those parameters alone (with one warning).
``"auto"``
    ``"structured"`` when supported layers hold at least half of the parameters; else
    ``"jacobian"`` when one sample's Jacobian (O·P numbers) fits in the memory budget; else
    ``"vp"``.

Tiling: the samples of x1 and x2 are processed in tiles of ``batch_size`` (default: the largest
that keeps the intermediates of one tile pair under ``memory_budget`` bytes), so the kernel of a
large data set is computed in bounded memory; only the result has to fit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn

from paramsym.core.params import Params, check_finite, resolve_params, to_dtype
from paramsym.errors import InvalidArgumentError, ParamsymWarning, ShapeError
from paramsym.nn.layers import NTKLinear

Mode = Literal["full", "trace", "diagonal"]
Method = Literal["auto", "jacobian", "vp", "structured"]

DEFAULT_MEMORY_BUDGET = 2 * 1024**3
"""Bytes of intermediates (Jacobians, cotangents, products) one tile pair may use."""


class StructuredFallbackWarning(ParamsymWarning):
    """``method="structured"`` computed some parameters' kernel part by Jacobian contraction."""


# -- inputs ---------------------------------------------------------------------------------------


@dataclass
class _Problem:
    """Validated inputs of one kernel computation."""

    model: nn.Module
    params: Params
    x1: Tensor
    x2: Tensor
    outputs: int
    mode: Mode
    same: bool

    def forward(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """``(b, ...) -> (b, O)`` at ``params``, buffers copied so the model is never changed."""
        buffers = {k: b.clone() for k, b in self.model.named_buffers()}
        out = torch.func.functional_call(self.model, {**buffers, **params}, (x,))
        return out.reshape(x.shape[0], -1)


def _check_sample_independent(model: nn.Module) -> None:
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            raise InvalidArgumentError(
                f"ntk: BatchNorm '{name}' is in training mode, so each output depends on the "
                "whole batch and the per-sample kernel is undefined; call model.eval() first"
            )


def _check_input(x: Any, name: str, model: nn.Module) -> Tensor:
    if not isinstance(x, Tensor):
        raise InvalidArgumentError(f"ntk: {name} must be a tensor, got {type(x).__name__}")
    if x.ndim < 1 or x.shape[0] < 1:
        raise ShapeError(
            f"ntk: {name} must have a batch axis with at least one sample, got {tuple(x.shape)}"
        )
    takes_indices = any(isinstance(m, nn.Embedding) for m in model.modules())
    if not x.is_floating_point() and not takes_indices:
        raise InvalidArgumentError(
            f"ntk: {name} has dtype {x.dtype}; the model has no embedding, so pass floating "
            "inputs (e.g. x.float())"
        )
    if x.is_floating_point():
        check_finite([(name, x)], "ntk")
    return x


def _prepare(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None,
    mode: str,
    params: Mapping[str, Tensor] | None,
    dtype: torch.dtype | None,
) -> _Problem:
    if mode not in ("full", "trace", "diagonal"):
        raise InvalidArgumentError(f"ntk: mode must be 'full', 'trace' or 'diagonal', got {mode!r}")
    _check_sample_independent(model)
    point = resolve_params(model, params)
    check_finite(point, "ntk: params")
    x1 = _check_input(x1, "x1", model)
    same = x2 is None
    x2 = x1 if x2 is None else _check_input(x2, "x2", model)
    if x1.shape[1:] != x2.shape[1:]:
        raise ShapeError(
            f"ntk: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} differ after the batch axis"
        )
    if dtype is not None:
        point = to_dtype(point, dtype)
        x1 = x1.to(dtype) if x1.is_floating_point() else x1
        x2 = x2.to(dtype) if x2.is_floating_point() else x2
    problem = _Problem(model, point, x1, x2, 0, mode, same)  # type: ignore[arg-type]
    try:
        with torch.no_grad():
            problem.outputs = problem.forward(point, x1[:1]).shape[1]
    except (RuntimeError, IndexError) as error:
        raise ShapeError(
            f"ntk: the model cannot evaluate x1 of shape {tuple(x1.shape)}: {error}"
        ) from None
    return problem


# -- shared pieces --------------------------------------------------------------------------------


def _finish(full_block: Tensor, mode: Mode) -> Tensor:
    """Reduce a ``(b1, b2, O, O)`` block to the mode's shape."""
    if mode == "full":
        return full_block
    diagonal = torch.diagonal(full_block, dim1=2, dim2=3)  # (b1, b2, O)
    return diagonal if mode == "diagonal" else diagonal.sum(-1)


def _allocate(problem: _Problem) -> Tensor:
    n1, n2, o = problem.x1.shape[0], problem.x2.shape[0], problem.outputs
    shape = {"full": (n1, n2, o, o), "trace": (n1, n2), "diagonal": (n1, n2, o)}[problem.mode]
    ref = next(iter(problem.params.values()))
    return torch.zeros(shape, dtype=ref.dtype, device=ref.device)


def _tiles(n: int, size: int) -> list[slice]:
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]


def _element_size(problem: _Problem) -> int:
    return next(iter(problem.params.values())).element_size()


# -- jacobian contraction -------------------------------------------------------------------------


def _jacobian(problem: _Problem, names: Sequence[str], x: Tensor) -> dict[str, Tensor]:
    """Per-sample Jacobians of the O outputs w.r.t. parameters ``names``: name → (b, O, numel)."""
    fixed = {k: v for k, v in problem.params.items() if k not in names}

    def single(free: dict[str, Tensor], sample: Tensor) -> Tensor:
        return problem.forward({**fixed, **free}, sample.unsqueeze(0))[0]

    free = {k: problem.params[k] for k in names}
    jac = torch.func.vmap(torch.func.jacrev(single), in_dims=(None, 0))(free, x)
    return {k: v.reshape(x.shape[0], problem.outputs, -1) for k, v in jac.items()}


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


def _jacobian_kernel(
    problem: _Problem, names: Sequence[str], batch_size: int | None, budget: int
) -> Tensor:
    size = sum(problem.params[n].numel() for n in names)
    per_sample = max(1, problem.outputs * size * _element_size(problem))
    tile = batch_size or max(1, budget // (2 * per_sample))
    result = _allocate(problem)
    for s1 in _tiles(problem.x1.shape[0], tile):
        j1 = _jacobian(problem, names, problem.x1[s1])
        for s2 in _tiles(problem.x2.shape[0], tile):
            j2 = j1 if problem.same and s1 == s2 else _jacobian(problem, names, problem.x2[s2])
            result[s1, s2] = _contract(j1, j2, problem.mode)
    return result


# -- NTK-vector products --------------------------------------------------------------------------


def _vp_kernel(problem: _Problem, batch_size: int | None, budget: int) -> Tensor:
    params = problem.params
    size = sum(p.numel() for p in params.values())
    o = problem.outputs
    chunk = max(1, budget // max(1, 2 * size * _element_size(problem)))
    tile = batch_size or max(problem.x1.shape[0], problem.x2.shape[0])
    result = _allocate(problem)
    for s2 in _tiles(problem.x2.shape[0], tile):
        x2 = problem.x2[s2]
        b2 = x2.shape[0]
        pull = torch.func.vjp(lambda p, x2=x2: problem.forward(p, x2), params)[1]
        basis = torch.eye(b2 * o, dtype=result.dtype, device=result.device).reshape(b2 * o, b2, o)
        for s1 in _tiles(problem.x1.shape[0], tile):
            x1 = problem.x1[s1]

            def push(u: dict[str, Tensor], x1: Tensor = x1) -> Tensor:
                return torch.func.jvp(lambda p: problem.forward(p, x1), (params,), (u,))[1]

            columns = []
            for start in range(0, b2 * o, chunk):
                (u,) = torch.func.vmap(pull)(basis[start : start + chunk])
                columns.append(torch.func.vmap(push)(u))  # (chunk, b1, O)
            block = torch.cat(columns).reshape(b2, o, x1.shape[0], o)  # [j, p, i, o]
            result[s1, s2] = _finish(block.permute(2, 0, 3, 1), problem.mode)
    return result


# -- structured derivatives -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """A module whose kernel has the (a·a′)(δ·δ′) form."""

    name: str
    module: nn.Module
    weight: str
    bias: str | None
    weight_scale: float
    bias_scale: float

    def features(self, captured: Tensor) -> Tensor:
        """Layer inputs as ``(b, T, in)`` rows whose outer product with δ gives ∂f/∂W."""
        if isinstance(self.module, nn.Conv2d):
            m = self.module
            assert isinstance(m.padding, tuple)  # string padding is routed to the fallback
            patches = F.unfold(
                captured, m.kernel_size, m.dilation, m.padding, m.stride
            )  # (b, C·kh·kw, L)
            return patches.transpose(1, 2)
        return captured.reshape(captured.shape[0], -1, captured.shape[-1])

    def cotangents(self, delta: Tensor) -> Tensor:
        """Output cotangents ``(O, b, ..., out)`` as ``(O, b, T, out)``."""
        if isinstance(self.module, nn.Conv2d):
            return delta.flatten(3).transpose(2, 3)  # (O, b, L, C_out)
        return delta.reshape(delta.shape[0], delta.shape[1], -1, delta.shape[-1])


def _structured_layers(
    model: nn.Module, params: Mapping[str, Tensor]
) -> tuple[list[_Layer], list[str]]:
    """Supported layers, and the parameter names left for the Jacobian fallback."""
    owners: dict[int, int] = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    layers: list[_Layer] = []
    covered: set[str] = set()
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        weight, bias = f"{prefix}weight", f"{prefix}bias"
        supported = isinstance(module, (nn.Linear, NTKLinear)) or (
            isinstance(module, nn.Conv2d)
            and module.groups == 1
            and module.padding_mode == "zeros"
            and isinstance(module.padding, tuple)
        )
        if not supported or weight not in params:
            continue
        if owners.get(id(module.weight), 0) > 1 or (
            module.bias is not None and owners.get(id(module.bias), 0) > 1
        ):
            continue  # shared weights: the per-layer products would miss cross terms
        scale_w, scale_b = (
            (module.weight_scale, module.bias_std) if isinstance(module, NTKLinear) else (1.0, 1.0)
        )
        has_bias = module.bias is not None and bias in params
        layers.append(
            _Layer(name, module, weight, bias if has_bias else None, float(scale_w), float(scale_b))
        )
        covered.update({weight, bias} if has_bias else {weight})
    rest = [k for k in params if k not in covered]
    return layers, rest


def _sample_shapes(
    problem: _Problem, layers: Sequence[_Layer]
) -> dict[str, tuple[torch.Size, torch.Size]]:
    """Per-sample input and output shapes of each layer, from one forward pass on one sample."""
    shapes: dict[str, tuple[torch.Size, torch.Size]] = {}
    handles = [
        layer.module.register_forward_hook(
            lambda m, args, out, name=layer.name: shapes.__setitem__(
                name, (args[0].shape[1:], out.shape[1:])
            )
        )
        for layer in layers
    ]
    try:
        with torch.no_grad():
            problem.forward(problem.params, problem.x1[:1])
    finally:
        for handle in handles:
            handle.remove()
    return shapes


def _taps(
    problem: _Problem,
    layers: Sequence[_Layer],
    shapes: Mapping[str, tuple[torch.Size, torch.Size]],
    x: Tensor,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Layer inputs ``a`` (name → captured input) and output cotangents ``δ`` (name → (O, b, …))."""
    ref = next(iter(problem.params.values()))
    zeros = {
        name: torch.zeros((x.shape[0], *out), dtype=ref.dtype, device=ref.device)
        for name, (_, out) in shapes.items()
    }

    def tapped(eps: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        captured: dict[str, Tensor] = {}

        def hook(name: str) -> Callable[..., Tensor]:
            def add_tap(module: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> Tensor:
                captured[name] = args[0]
                return out + eps[name]

            return add_tap

        handles = [layer.module.register_forward_hook(hook(layer.name)) for layer in layers]
        try:
            return problem.forward(problem.params, x), captured
        finally:
            for handle in handles:
                handle.remove()

    _, pull, inputs = torch.func.vjp(tapped, zeros, has_aux=True)  # type: ignore[misc]
    o = problem.outputs
    basis = torch.eye(o, dtype=ref.dtype, device=ref.device).unsqueeze(1).expand(o, x.shape[0], o)
    (deltas,) = torch.func.vmap(pull)(basis)
    return {k: v.detach() for k, v in inputs.items()}, deltas


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


def _accumulate_layer(
    block: Tensor, layer: _Layer, a1: Tensor, d1: Tensor, a2: Tensor, d2: Tensor, mode: Mode
) -> None:
    """Add one layer's kernel block, from inputs ``(b, T, in)`` and cotangents
    ``(O, b, T, out)``, to ``block`` in the contraction's own layout: ``(O, b1, O, b2)`` for
    ``"full"``, ``(O, b1, b2)`` for ``"diagonal"``, ``(b1, b2)`` for ``"trace"``
    (:func:`_to_kernel_layout` turns it into the kernel's)."""
    if a1.shape[1] == 1:  # plain vectors: (a·a′)(δ·δ′)
        gram_a = layer.weight_scale**2 * (a1[:, 0] @ a2[:, 0].T)
        if layer.bias is not None:
            gram_a = gram_a + layer.bias_scale**2
        u, v = d1[:, :, 0], d2[:, :, 0]  # (O, b, out)
        if mode == "full":
            rows_u = u.reshape(-1, u.shape[-1])
            rows_v = rows_u if d1 is d2 else v.reshape(-1, v.shape[-1])
            gram_d = _gram(rows_u, rows_v).view(block.shape)
            block.addcmul_(gram_d, gram_a[None, :, None, :])
            return
        gram_diag = torch.bmm(u, v.transpose(1, 2))  # (O, b1, b2)
        if mode == "diagonal":
            block.addcmul_(gram_diag, gram_a)
        else:
            block.addcmul_(gram_diag.sum(0), gram_a)
        return
    # Sequences / convolution patches: sum over pairs of positions t, s.
    gram_a = layer.weight_scale**2 * torch.einsum("itk,jsk->ijts", a1, a2)
    if layer.bias is not None:
        gram_a = gram_a + layer.bias_scale**2
    if mode == "full":
        block += torch.einsum("ijts,oitk,pjsk->oipj", gram_a, d1, d2)
    elif mode == "diagonal":
        block += torch.einsum("ijts,oitk,ojsk->oij", gram_a, d1, d2)
    else:
        block += torch.einsum("ijts,oitk,ojsk->ij", gram_a, d1, d2)


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


def _structured_tile(
    problem: _Problem,
    layers: Sequence[_Layer],
    shapes: Mapping[str, tuple[torch.Size, torch.Size]],
    budget: int,
) -> int:
    """Largest tile whose inputs, cotangents and per-layer blocks fit in ``budget`` bytes."""
    if not layers:
        return max(problem.x1.shape[0], problem.x2.shape[0])
    per_sample = positions = 0
    for layer in layers:
        inputs, outputs = shapes[layer.name]
        in_size, out_size = inputs.numel(), outputs.numel()
        if isinstance(layer.module, nn.Conv2d):
            kernel = layer.module.weight[0].numel()  # C_in · kh · kw per patch
            count = out_size // layer.module.out_channels
            in_size, layer_positions = kernel * count, count
        else:
            layer_positions = max(1, in_size // inputs[-1])
        per_sample += in_size + problem.outputs * out_size
        positions = max(positions, layer_positions)
    pair = problem.outputs**2 + positions**2 * (1 + problem.outputs)  # block and position sums
    element = _element_size(problem)
    tile = 1
    while tile < 4096 and element * (4 * tile * per_sample + 2 * tile * tile * pair) <= budget:
        tile *= 2
    return max(1, tile // 2) if tile > 1 else 1


def _structured_kernel(problem: _Problem, batch_size: int | None, budget: int) -> Tensor:
    layers, rest = _structured_layers(problem.model, problem.params)
    if rest:
        modules = sorted({k.rsplit(".", 1)[0] if "." in k else "(root)" for k in rest})
        warnings.warn(
            f"ntk(method='structured'): {len(rest)} parameter tensor(s) of {modules[:6]} are not "
            "in Linear/Conv2d layers; their part of the kernel uses the Jacobian contraction",
            StructuredFallbackWarning,
            stacklevel=3,
        )
    shapes = _sample_shapes(problem, layers)
    tile = batch_size or _structured_tile(problem, layers, shapes, budget)
    result = _allocate(problem) if not rest else _jacobian_kernel(problem, rest, batch_size, budget)
    for s1 in _tiles(problem.x1.shape[0], tile):
        a1, d1 = _taps(problem, layers, shapes, problem.x1[s1])
        f1 = {
            layer.name: (layer.features(a1[layer.name]), layer.cotangents(d1[layer.name]))
            for layer in layers
        }
        for s2 in _tiles(problem.x2.shape[0], tile):
            if problem.same and s1 == s2:
                f2 = f1
            else:
                a2, d2 = _taps(problem, layers, shapes, problem.x2[s2])
                f2 = {
                    layer.name: (layer.features(a2[layer.name]), layer.cotangents(d2[layer.name]))
                    for layer in layers
                }
            block = _contraction_block(
                problem.outputs, s1.stop - s1.start, s2.stop - s2.start, problem.mode, result
            )
            for layer in layers:
                (u1, e1), (u2, e2) = f1[layer.name], f2[layer.name]
                _accumulate_layer(block, layer, u1, e1, u2, e2, problem.mode)
            result[s1, s2] += _to_kernel_layout(block, problem.mode)
    return result


# -- the public function --------------------------------------------------------------------------


def choose_method(
    model: nn.Module,
    params: Mapping[str, Tensor],
    outputs: int,
    budget: int = DEFAULT_MEMORY_BUDGET,
) -> Method:
    """The method ``method="auto"`` uses (see the module docstring for the rule)."""
    layers, rest = _structured_layers(model, params)
    total = sum(p.numel() for p in params.values())
    in_layers = total - sum(params[k].numel() for k in rest)
    if layers and in_layers >= total / 2:
        return "structured"
    element = next(iter(params.values())).element_size()
    return "jacobian" if outputs * total * element <= budget else "vp"


def ntk(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    mode: Mode = "full",
    method: Method = "auto",
    params: Mapping[str, Tensor] | None = None,
    batch_size: int | None = None,
    dtype: torch.dtype | None = None,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> Tensor:
    """The empirical NTK of ``model`` between ``x1`` and ``x2`` (default ``x1``).

    Args:
        model: any module whose outputs depend on their own sample only.
        x1, x2: inputs ``(n1, ...)`` and ``(n2, ...)`` with the same trailing shape.
        mode: ``"full"`` → ``(n1, n2, O, O)``, ``"trace"`` → ``(n1, n2)``,
            ``"diagonal"`` → ``(n1, n2, O)``; O is the number of outputs per sample.
        method: ``"auto"``, ``"jacobian"``, ``"vp"`` or ``"structured"`` (module docstring).
        params: point θ (default: the model's parameters).
        batch_size: samples per tile of x1 and x2 (default: chosen from ``memory_budget``).
        dtype: compute in this dtype (parameters and floating inputs are cast).
        memory_budget: bytes of intermediates per tile pair when ``batch_size`` is not given.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 8, 2], activation="tanh", seed=0).double()
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> ps.ntk(model, x).shape, ps.ntk(model, x, mode="trace").shape
    (torch.Size([5, 5, 2, 2]), torch.Size([5, 5]))
    """
    if method not in ("auto", "jacobian", "vp", "structured"):
        raise InvalidArgumentError(
            f"ntk: method must be 'auto', 'jacobian', 'vp' or 'structured', got {method!r}"
        )
    if batch_size is not None and batch_size < 1:
        raise InvalidArgumentError(f"ntk: batch_size must be >= 1, got {batch_size}")
    problem = _prepare(model, x1, x2, mode, params, dtype)
    if method == "auto":
        method = choose_method(model, problem.params, problem.outputs, memory_budget)
    # torch.func transforms ignore an outer no_grad; it only stops graphs of the contractions.
    with torch.no_grad():
        if method == "jacobian":
            return _jacobian_kernel(problem, list(problem.params), batch_size, memory_budget)
        if method == "vp":
            return _vp_kernel(problem, batch_size, memory_budget)
        return _structured_kernel(problem, batch_size, memory_budget)


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
    "StructuredFallbackWarning",
    "choose_method",
    "kernel_matrix",
    "ntk",
]
