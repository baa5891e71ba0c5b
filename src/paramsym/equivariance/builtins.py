"""Built-in equivariances of seed 003 (notes 003 §3-4): homogeneity, last-layer GL(d), softmax
translation and normalisation scale, each found on the user's model by parameter and module name.

Layers are the modules that own parameters directly, in ``model.named_modules()`` order, which
is the forward order for ``nn.Sequential`` and for models that register their layers in the
order they use them. The sanity check of :func:`~paramsym.equivariance.check_identities`
verifies every built-in on the model and batch before any identity is computed, so a model whose
structure differs (a norm layer, a skip connection, an activation that is not positively
homogeneous) gives an :class:`~paramsym.errors.EquivarianceError` rather than wrong identities.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from paramsym.core.params import Params
from paramsym.equivariance.transformations import Equivariance
from paramsym.errors import InvalidArgumentError

_NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._NormBase,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
)


def _layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules that own trainable parameters directly, in registration order."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if any(p.requires_grad for p in module.parameters(recurse=False))
    ]


def _own(prefix: str, module: nn.Module) -> list[str]:
    return [
        f"{prefix}.{name}" if prefix else name
        for name, p in module.named_parameters(recurse=False)
        if p.requires_grad
    ]


def _is_bias(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == "bias"


def _scaled(params: Params, powers: dict[str, Tensor]) -> Params:
    return {name: powers[name].exp() * t for name, t in params.items() if name in powers}


def homogeneity(model: nn.Module, degree: int | None = None) -> Equivariance:
    """Global homogeneity of a ReLU-type network: T = e^g θ, S = e^{mg} y (notes 003 §4.2).

    For a chain of m layers with positively 1-homogeneous activations (ReLU, LeakyReLU,
    identity), f(cθ) = c^m f(θ) when the net is bias-free; with biases, scaling the bias of the
    l-th layer by c^l keeps it exact, which is what T does (so J = (W_l, l·b_l) at g₀; J = θ for
    a bias-free net, the Euler relation ⟨∇L, θ⟩ = m⟨∇ℓ, f⟩ of §4.2).

    The coordinate is g = log c, with g₀ = 0 (the paper's T = gθ has g₀ = 1 and J = θ/g; with
    the exponential J = θ at every g and every g is a good position).

    Args:
        model: the network; its layers are the modules owning parameters.
        degree: m, the exponent of S (default: the number of layers).
    """
    layers = _layers(model)
    if not layers:
        raise InvalidArgumentError("homogeneity: the model has no trainable parameters")
    m = len(layers) if degree is None else int(degree)
    powers: dict[str, float] = {}
    for position, (prefix, module) in enumerate(layers, start=1):
        for name in _own(prefix, module):
            powers[name] = float(position) if _is_bias(name) else 1.0
    biased = any(_is_bias(name) for name in powers)

    def transform(params: Params, g: Tensor) -> Params:
        return _scaled(params, {k: p * g[0] for k, p in powers.items() if k in params})

    def output_transform(y: Tensor, g: Tensor) -> Tensor:
        return (m * g[0]).exp() * y

    def tangent(params: Params, xi: Tensor) -> Params:
        return {k: (p * xi[0]) * params[k] for k, p in powers.items() if k in params}

    notes = ["T = e^g θ (g₀ = 0) rather than gθ: J = θ at every g"]
    if biased:
        notes.append("the bias of the l-th layer scales by e^{l g}")
    return Equivariance(
        transform,
        output_transform,
        dim=1,
        name=f"homogeneity(m={m})",
        notes=tuple(notes),
        tangent=tangent,
    )


def layer_homogeneity(model: nn.Module, layers: Sequence[str] | None = None) -> Equivariance:
    """Per-layer homogeneity: g ∈ R^L scales the weight of layer l by e^{g_l}; S = e^{Σg_l} y.

    For a chain with positively 1-homogeneous activations f is 1-homogeneous in each layer's
    weight when bias-free; a bias at chain position q scales by e^{Σ_{l ≤ q} g_l} (the product
    of the scales of the selected layers up to it), which keeps it exact with biases.

    Args:
        model: the network.
        layers: module names of the layers to scale (default: every module owning parameters).
    """
    chain = _layers(model)
    names = [name for name, _ in chain]
    chosen = list(names) if layers is None else list(layers)
    unknown = [name for name in chosen if name not in names]
    if unknown or not chosen:
        raise InvalidArgumentError(
            f"layer_homogeneity: layers {unknown or chosen} are not modules owning parameters "
            f"of the model; choose from {names}"
        )
    selected = sorted(names.index(name) for name in chosen)
    weights: dict[str, int] = {}
    biases: dict[str, list[int]] = {}
    for position, (prefix, module) in enumerate(chain):
        below = [i for i, s in enumerate(selected) if s <= position]
        for name in _own(prefix, module):
            if _is_bias(name):
                if below:
                    biases[name] = below
            elif position in selected:
                weights[name] = selected.index(position)

    def exponents(params: Params, g: Tensor) -> dict[str, Tensor]:
        powers = {k: g[i] for k, i in weights.items() if k in params}
        powers.update({k: g[idx].sum() for k, idx in biases.items() if k in params})
        return powers

    def transform(params: Params, g: Tensor) -> Params:
        return _scaled(params, exponents(params, g))

    def output_transform(y: Tensor, g: Tensor) -> Tensor:
        return g.sum().exp() * y

    def tangent(params: Params, xi: Tensor) -> Params:
        return {k: e * params[k] for k, e in exponents(params, xi).items()}

    label = ",".join(names[i] or "(model)" for i in selected)
    return Equivariance(
        transform,
        output_transform,
        dim=len(selected),
        name=f"layer_homogeneity[{label}]",
        notes=("T scales layer l by e^{g_l}; biases by the product of the scales up to them",),
        tangent=tangent,
    )


def _last_linear(model: nn.Module, layer: str | None, where: str) -> tuple[str, nn.Linear]:
    modules = dict(model.named_modules())
    if layer is not None:
        module = modules.get(layer)
        if not isinstance(module, nn.Linear):
            raise InvalidArgumentError(
                f"{where}: {layer!r} is not an nn.Linear of the model "
                f"({type(module).__name__ if module is not None else 'no such module'})"
            )
        return layer, module
    linears = [(name, m) for name, m in modules.items() if isinstance(m, nn.Linear)]
    if not linears:
        raise InvalidArgumentError(f"{where}: the model has no nn.Linear; pass layer=")
    return linears[-1]


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def last_layer_gl(model: nn.Module, layer: str | None = None) -> Equivariance:
    """Last-layer GL(d): T = (MW, Mb, ψ), S(y, M) = My on the last axis (notes 003 §5.3).

    For f = W φ(ψ) + b with W of shape (d, h), f(MW, Mb, ψ) = M f for every M. The coordinates
    are g = vec(M − I) ∈ R^{d²} (row-major), g₀ = 0; at g₀, J_E = (EW, Eb, 0) and K_E = E f for
    the generator E = E_ab, and eq. (7) (EW, 0)ᵀH(EW, 0) = (Ef)ᵀ∇²ℓ(Ef) is item 2b.

    Args:
        model: a network whose output is the output of ``layer`` (nothing after it).
        layer: module name of the final ``nn.Linear`` (default the last one registered).
    """
    prefix, linear = _last_linear(model, layer, "last_layer_gl")
    d = linear.out_features
    weight, bias = _prefixed(prefix, "weight"), _prefixed(prefix, "bias")
    has_bias = linear.bias is not None

    def matrix(g: Tensor) -> Tensor:
        return torch.eye(d, dtype=g.dtype, device=g.device) + g.reshape(d, d)

    def transform(params: Params, g: Tensor) -> Params:
        M = matrix(g)
        out = {weight: M @ params[weight]}
        if has_bias and bias in params:
            out[bias] = M @ params[bias]
        return out

    def output_transform(y: Tensor, g: Tensor) -> Tensor:
        return y @ matrix(g).T

    def tangent(params: Params, xi: Tensor) -> Params:
        E = xi.reshape(d, d)
        out = {weight: E @ params[weight]}
        if has_bias and bias in params:
            out[bias] = E @ params[bias]
        return out

    return Equivariance(
        transform,
        output_transform,
        dim=d * d,
        tangent=tangent,
        name=f"last_layer_GL({d})[{prefix}]",
        notes=("g = vec(M − I), row-major; S acts on the last axis of the output",),
    )


def softmax_translation(model: nn.Module, layer: str | None = None) -> Equivariance:
    """Softmax translation as an output-side equivariance: T shifts the final bias by g·1 and
    S(y, g) = y + g·1 on the last axis (k = 1).

    The model itself changes (f(T(θ, g)) = f(θ) + g·1), so this is an equivariance, not a
    symmetry; softmax cross-entropy is invariant to S (ℓ∘S = ℓ), which makes it a loss-level
    symmetry (notes 003 §8.8, first option). With cross-entropy, Kᵀ∇ℓ = Σ_samples Σ_classes
    ∂ℓ/∂y = 0, so item 1 reads ⟨∇_b L, 1⟩ = 0, and H(0, 1) = 0 (a translation: J constant).

    Args:
        model: a network whose output is the logits of ``layer``.
        layer: module name of the final ``nn.Linear`` (default the last one); it needs a bias.
    """
    prefix, linear = _last_linear(model, layer, "softmax_translation")
    if linear.bias is None:
        raise InvalidArgumentError(
            f"softmax_translation: the layer {prefix!r} has no bias to shift; the weight shift "
            "W + 1vᵀ moves each sample's logits by vᵀx, which S cannot express without x"
        )
    bias = _prefixed(prefix, "bias")

    def transform(params: Params, g: Tensor) -> Params:
        return {bias: params[bias] + g[0]}

    def output_transform(y: Tensor, g: Tensor) -> Tensor:
        return y + g[0]

    def tangent(params: Params, xi: Tensor) -> Params:
        return {bias: xi[0] * torch.ones_like(params[bias])}

    return Equivariance(
        transform,
        output_transform,
        dim=1,
        tangent=tangent,
        name=f"softmax_translation[{prefix}]",
        notes=("loss-level symmetry: softmax cross-entropy is invariant to S (notes 003 §8.8)",),
    )


def normalization_scale(
    model: nn.Module, norm: str, weights: Sequence[str] | None = None
) -> Equivariance:
    """Scale invariance of a normalisation layer: T scales the parameters feeding ``norm`` by
    e^g, S = id (notes 003 §3, "Normalization scale invariance").

    BatchNorm with batch statistics (training mode), LayerNorm, GroupNorm and RMSNorm undo a
    common scale of their input exactly only when their ``eps`` is 0: with eps > 0 the output
    changes by O(eps / variance) (1e-4 to 7e-6 measured, notes 003 §5b), and the equivariance is
    returned with ``exact=False`` and labelled approximate. torch refuses eps = 0 for BatchNorm
    in training mode, so BatchNorm scale invariance is always approximate here. A BatchNorm in
    evaluation mode with running statistics is not scale-invariant and is refused.

    Args:
        model: the network.
        norm: module name of the normalisation layer.
        weights: parameter names scaled by T (default: every parameter of the module that owns
            parameters just before ``norm`` in registration order, e.g. the Linear/Conv feeding
            it in a Sequential).
    """
    modules = dict(model.named_modules())
    layer = modules.get(norm)
    if layer is None or not isinstance(layer, _NORM_TYPES):
        raise InvalidArgumentError(
            f"normalization_scale: {norm!r} is not a normalisation layer of the model "
            f"(BatchNorm, LayerNorm, GroupNorm, RMSNorm); got "
            f"{type(layer).__name__ if layer is not None else 'no such module'}"
        )
    if (
        isinstance(layer, nn.modules.batchnorm._BatchNorm)
        and not layer.training
        and (layer.track_running_stats)
    ):
        raise InvalidArgumentError(
            f"normalization_scale: BatchNorm {norm!r} is in evaluation mode and normalises with "
            "its running statistics, which a scale of its input does not cancel; analyse it in "
            "training mode (model.train(), batch statistics)"
        )
    if weights is None:
        chain = [(n, m) for n, m in _layers(model) if not isinstance(m, _NORM_TYPES)]
        order = list(modules)
        before = [(n, m) for n, m in chain if order.index(n) < order.index(norm)]
        if not before:
            raise InvalidArgumentError(
                f"normalization_scale: no module with parameters precedes {norm!r}; pass weights="
            )
        source, module = before[-1]
        scaled = _own(source, module)
    else:
        scaled = list(weights)
        source = ",".join(scaled)
    eps = getattr(layer, "eps", None)
    exact = eps is not None and float(eps) == 0.0
    notes = [f"scales {scaled} by e^g; {norm} undoes it"]
    if not exact:
        notes.append(
            f"approximate: {norm} has eps={eps} > 0, so a scale of its input changes its output "
            "by O(eps / variance); exact for eps = 0"
        )

    def transform(params: Params, g: Tensor) -> Params:
        return {k: g[0].exp() * params[k] for k in scaled if k in params}

    def tangent(params: Params, xi: Tensor) -> Params:
        return {k: xi[0] * params[k] for k in scaled if k in params}

    return Equivariance(
        transform,
        None,
        tangent=tangent,
        dim=1,
        name=f"normalization_scale[{source}->{norm}]",
        exact=exact,
        notes=tuple(notes),
    )
