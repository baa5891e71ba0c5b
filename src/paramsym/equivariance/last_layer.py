"""Last-layer equivariance: curvature along (EW, 0) from the output alone (seed 003 §5.3, eq. 7).

If the model ends in a linear layer, f = W φ(ψ) + b, then f(MW, Mb, ψ) = M f for every
M ∈ R^{d×d} (eq. 6, with the bias carried along; the paper's layer has none): an equivariance
with T = (MW, Mb, ψ) and S(y, M) = My acting on each sample's d-vector. At M = I its
characteristic direction for a generator E is J_E = (EW, Eb, 0) and K_E = Ef (each sample's
f_s ↦ E f_s). Theorem 1 then gives, with f the stacked output and ℓ the loss of it:

* item 1: ∇_W L Wᵀ + ∇_b L bᵀ = Σ_s ∇ℓ_s f_sᵀ (a d×d identity, all E at once);
* **eq. (7)** (Corollary 3, item 2b): J_Eᵀ H J_E = (Ef)ᵀ∇²ℓ(f)(Ef): the parameter-space
  sharpness along (EW, Eb) is an output-space one;
* item 2a (not stated in the paper; note 003 §3): H J_E = Fᵀ∇²ℓ(Ef) + Fᵀ(Eᵀ∇ℓ) −
  (Eᵀ∇_W L, Eᵀ∇_b L, 0);
* for softmax cross-entropy, ∇²ℓ is block-diagonal with blocks diag(p_s) − p_s p_sᵀ (divided by
  n for ``reduction="mean"``), so eq. (7) is **mean_s Var_{i∼p_s}[(E f_s)_i]** (the sum over
  samples for ``reduction="sum"``).

:func:`top_versus_rest_sharpness` uses eq. (7) to track, at the cost of a forward pass, how
sharp moving the top class against the rest is compared with redistributing the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from paramsym.core.params import Params, flatten, functional_call, inner
from paramsym.curvature import HessianOperator
from paramsym.equivariance.stacked import (
    ApplicationResult,
    Batch,
    LossFn,
    StackedLoss,
    relative_residual,
    spectral_norm,
    unpack_batch,
    vector_norm,
)
from paramsym.errors import EquivarianceError, InvalidArgumentError, ShapeError
from paramsym.nn.layers import NTKLinear


def last_linear_layer(model: nn.Module, layer: str | None = None) -> str:
    """The name of the model's last linear layer (``nn.Linear`` or ``NTKLinear``).

    ``layer`` picks one by module name (checked); by default it is the linear module registered
    last, which is the output layer of a ``Sequential`` and of most hand-written models. Whether
    it really produces the output is checked numerically by the functions that use it.

    >>> import paramsym as ps
    >>> last_linear_layer(ps.mlp([4, 8, 3]))
    '2'
    """
    linear = [
        name for name, m in model.named_modules() if isinstance(m, (nn.Linear, NTKLinear)) and name
    ]
    if layer is not None:
        if layer not in linear:
            raise InvalidArgumentError(
                f"layer={layer!r} is not a linear module of the model; its linear layers are "
                f"{linear}"
            )
        return layer
    if not linear:
        raise InvalidArgumentError(
            "the model has no nn.Linear layer, so the last-layer equivariance f(MW) = Mf does "
            "not apply; pass layer= naming the output layer if it is a linear module"
        )
    return linear[-1]


def _apply(matrix: Tensor, output: Tensor) -> Tensor:
    """Each sample's d-vector (the last axis) multiplied by ``matrix``: f_s ↦ M f_s."""
    return output @ matrix.T.to(output.dtype)


def _direction(point: Params, name: str, matrix: Tensor) -> Params:
    """J_E = (EW, Eb, 0) as a params dict (the bias entry when the layer has one in θ)."""
    out = {k: torch.zeros_like(t) for k, t in point.items()}
    out[f"{name}.weight"] = matrix @ point[f"{name}.weight"]
    if f"{name}.bias" in point:
        out[f"{name}.bias"] = matrix @ point[f"{name}.bias"]
    return out


def _check_layer(
    model: nn.Module, batch: Batch, point: Params, name: str, output: Tensor, where: str
) -> int:
    """d, after checking that W is in θ, that the output's last axis has d entries and that
    f(MW, Mb) = M f for a random M (the equivariance sanity check)."""
    if f"{name}.weight" not in point:
        raise InvalidArgumentError(
            f"{where}: '{name}.weight' is not among the parameters θ (frozen?); pass "
            "params= including it"
        )
    weight = point[f"{name}.weight"]
    d = weight.shape[0]
    if output.ndim == 0 or output.shape[-1] != d:
        raise ShapeError(
            f"{where}: layer '{name}' has {d} outputs but the model's output has shape "
            f"{tuple(output.shape)}; the last axis must be that layer's output"
        )
    generator = torch.Generator().manual_seed(0)
    matrix = torch.randn(d, d, generator=generator, dtype=torch.float64).to(weight)
    moved = dict(point)
    moved[f"{name}.weight"] = matrix @ weight
    if f"{name}.bias" in point:
        moved[f"{name}.bias"] = matrix @ point[f"{name}.bias"]
    x, _ = unpack_batch(batch, where)
    with torch.no_grad():
        change = vector_norm(functional_call(model, moved, x) - _apply(matrix, output))
    scale = spectral_norm(matrix) * vector_norm(output)
    tolerance = float(torch.finfo(weight.dtype).eps) ** 0.5
    if change > tolerance * max(scale, 1e-300):
        raise EquivarianceError(
            f"{where}: layer '{name}' does not produce the output: f(MW, Mb) differs from Mf "
            f"by {change / max(scale, 1e-300):.2e} (relative) for a random M; pass layer= "
            "naming the output layer (with nothing but the identity after it)"
        )
    return d


def _softmax_ce_reduction(loss_fn: LossFn, output: Tensor, target: Tensor) -> str | None:
    """``"mean"`` or ``"sum"`` when ℓ is a plain softmax cross-entropy of (n, C) logits against
    class indices (whose Hessian is diag(p) − ppᵀ per sample), else ``None``."""
    if not isinstance(loss_fn, nn.CrossEntropyLoss) or loss_fn.weight is not None:
        return None
    if output.ndim != 2 or target.is_floating_point() or target.shape != output.shape[:1]:
        return None
    if bool((target == loss_fn.ignore_index).any()) or loss_fn.reduction not in ("mean", "sum"):
        return None
    return loss_fn.reduction


@dataclass
class LastLayerCurvature(ApplicationResult):
    """Eq. (7) and its companions for one generator E of the last-layer GL(d).

    Attributes:
        layer: the linear layer's module name.
        sharpness: J_Eᵀ H J_E (one HVP), J_E = (EW, Eb, 0).
        output_sharpness: (Ef)ᵀ∇²ℓ(f)(Ef), the right side of eq. (7).
        curvature_residual: eq. (7), |sharpness − output_sharpness| / (‖J‖‖HJ‖ + ‖Ef‖‖∇²ℓ Ef‖).
        action_residual: item 2a, ‖HJ − Fᵀ∇²ℓ(Ef) − Fᵀ(Eᵀ∇ℓ) + (Eᵀ∇_W L, Eᵀ∇_b L, 0)‖ over
            ‖HJ‖ + ‖Fᵀ∇²ℓ(Ef)‖ + ‖Fᵀ(Eᵀ∇ℓ)‖ + ‖E‖₂‖∇_{W,b}L‖.
        first_order_residual: item 1 for every E, ‖∇_W L Wᵀ + ∇_b L bᵀ − Σ_s ∇ℓ_s f_sᵀ‖ over
            ‖∇_W L‖‖W‖ + ‖∇_b L‖‖b‖ + ‖∇ℓ‖‖f‖.
        variance_form: for softmax cross-entropy, mean_s Var_{i∼p_s}[(E f_s)_i] (sum over
            samples with ``reduction="sum"``); ``None`` for other losses.
        variance_residual: |sharpness − variance_form| / (‖J‖‖HJ‖ + mean_s(E_p[z²] + E_p[z]²))
            with z = E f_s, or ``None``.
        direction_norm: ‖J_E‖, to turn the sharpness into a Rayleigh quotient.
    """

    layer: str
    sharpness: float
    output_sharpness: float
    curvature_residual: float
    action_residual: float
    first_order_residual: float
    variance_form: float | None
    variance_residual: float | None
    direction_norm: float

    @property
    def _residual_fields(self) -> tuple[str, ...]:
        return (
            "curvature_residual",
            "action_residual",
            "first_order_residual",
            "variance_residual",
        )


def last_layer_curvature(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    E: Tensor,
    layer: str | None = None,
    params: Mapping[str, Tensor] | None = None,
) -> LastLayerCurvature:
    """Eq. (7) (EW, 0)ᵀH(EW, 0) = (Ef)ᵀ∇²ℓ(f)(Ef), its Hessian action and first-order identity.

    Cost: one Hessian-vector product, two output-space products and two VJPs, plus one forward
    pass for the sanity check f(MW, Mb) = Mf at a random M (which raises
    :class:`~paramsym.errors.EquivarianceError` if ``layer`` is not the output layer).

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)), f the stacked output, shape ``(..., d)``.
        E: the generator, shape ``(d, d)`` (any matrix: GL(d) needs no structure).
        layer: the output layer's module name (default: :func:`last_linear_layer`).
        params: θ (default: the model's trainable parameters).
    """
    where = "last_layer_curvature"
    name = last_linear_layer(model, layer)
    stacked = StackedLoss(model, loss_fn, batch, params, where=where)
    point, f, grad_ell = stacked.point, stacked.output, stacked.loss_gradient
    d = _check_layer(model, batch, point, name, f, where)
    if E.shape != (d, d):
        raise ShapeError(f"{where}: E has shape {tuple(E.shape)}, expected ({d}, {d})")
    E = E.to(f)
    operator = HessianOperator(model, loss_fn, batch, point)
    direction = _direction(point, name, E)
    h_dir = operator.hvp(direction)
    e_f = _apply(E, f)
    ell_ef = stacked.loss_hvp(e_f)
    sharpness = float(inner(direction, h_dir))
    output_sharpness = float(torch.sum(e_f * ell_ef))
    dir_norm, h_dir_norm = vector_norm(flatten(direction)), vector_norm(flatten(h_dir))
    curvature_scale = dir_norm * h_dir_norm + vector_norm(e_f) * vector_norm(ell_ef)

    gn_term = flatten(stacked.vjp(ell_ef))
    covector_term = flatten(stacked.vjp(grad_ell @ E))  # Fᵀ(Eᵀ∇ℓ_s per sample)
    layer_grads = {k: torch.zeros_like(t) for k, t in point.items()}
    own = [k for k in (f"{name}.weight", f"{name}.bias") if k in point]
    for key in own:
        layer_grads[key] = E.T @ operator.gradient[key]
    layer_term = flatten(layer_grads)
    action_error = vector_norm(flatten(h_dir) - gn_term - covector_term + layer_term)
    own_grad_norm = vector_norm(torch.cat([operator.gradient[k].reshape(-1) for k in own]))
    action_scale = (
        h_dir_norm
        + vector_norm(gn_term)
        + vector_norm(covector_term)
        + spectral_norm(E) * own_grad_norm
    )

    weight, grad_w = point[f"{name}.weight"], operator.gradient[f"{name}.weight"]
    lhs1 = grad_w @ weight.T
    scale1 = vector_norm(grad_w) * vector_norm(weight)
    if f"{name}.bias" in point:
        bias, grad_b = point[f"{name}.bias"], operator.gradient[f"{name}.bias"]
        lhs1 = lhs1 + torch.outer(grad_b, bias)
        scale1 += vector_norm(grad_b) * vector_norm(bias)
    rhs1 = grad_ell.reshape(-1, d).T @ f.reshape(-1, d)
    scale1 += vector_norm(grad_ell) * vector_norm(f)

    _, target = unpack_batch(batch, where)
    reduction = _softmax_ce_reduction(loss_fn, f, target)
    variance: float | None = None
    variance_residual: float | None = None
    if reduction is not None:
        p = torch.softmax(f, dim=-1)
        first = (p * e_f).sum(dim=-1)
        second = (p * e_f * e_f).sum(dim=-1)
        per_sample, magnitude = second - first**2, second + first**2
        reduce = torch.mean if reduction == "mean" else torch.sum
        variance = float(reduce(per_sample))
        variance_residual = relative_residual(
            abs(sharpness - variance), dir_norm * h_dir_norm + float(reduce(magnitude))
        )
    return LastLayerCurvature(
        layer=name,
        sharpness=sharpness,
        output_sharpness=output_sharpness,
        curvature_residual=relative_residual(abs(sharpness - output_sharpness), curvature_scale),
        action_residual=relative_residual(action_error, action_scale),
        first_order_residual=relative_residual(vector_norm(lhs1 - rhs1), scale1),
        variance_form=variance,
        variance_residual=variance_residual,
        direction_norm=dir_norm,
    )


def _quotient(a: float, b: float) -> float:
    """a / b with 0/0 := 0 and a/0 := ±inf."""
    if b == 0.0:
        return 0.0 if a == 0.0 else math.copysign(math.inf, a)
    return a / b


@dataclass
class TopVersusRest:
    """Curvature of moving the top class against the rest vs. redistributing the rest (eq. 7).

    With c the top class and e_c its basis vector (d classes):

    * ``E_top = e_c e_cᵀ`` scales the top class's row of (W, b): it moves logit c alone, which
      under a softmax is moving class c against all the others;
    * ``E_rest = (I − e_c e_cᵀ) − r rᵀ/(d−1)``, r = 1 − e_c, maps each sample's logits to the
      other classes' logits minus their mean (and 0 for class c): it redistributes among the
      rest without moving class c or the rest's mean.

    Attributes:
        top_class: c.
        top_curvature, rest_curvature: (Ef)ᵀ∇²ℓ(f)(Ef) for E_top and E_rest, which by eq. (7)
            equal J_Eᵀ H J_E with J_E = (EW, Eb, 0).
        top_sharpness, rest_sharpness: those divided by ‖J_E‖² (Rayleigh quotients of H).
        ratio: top_sharpness / rest_sharpness (inf when the rest is flat).
        mean_top_probability: mean over samples of softmax(f_s)_c.
    """

    top_class: int
    top_curvature: float
    rest_curvature: float
    top_sharpness: float
    rest_sharpness: float
    ratio: float
    mean_top_probability: float


def top_versus_rest_sharpness(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Batch,
    layer: str | None = None,
    top_class: int | None = None,
    params: Mapping[str, Tensor] | None = None,
) -> TopVersusRest:
    """Top-versus-rest and within-rest sharpness along the last layer, from eq. (7).

    As the softmax concentrates on the top class, the paper expects redistribution among the
    low-probability classes to become flat relative to moving the top class against them
    (§5.3). Both numbers come from output-space products (no Hessian-vector product), exact by
    eq. (7) (:func:`last_layer_curvature` checks it). The layer is checked as there.

    Args:
        model, loss_fn, batch: L(θ) = ℓ(f(θ)), f of shape ``(n, d)``, d ≥ 3 classes.
        layer: the output layer (default: :func:`last_linear_layer`).
        top_class: c (default: the class most samples predict, the smallest on a tie).
        params: θ (default: the model's trainable parameters).
    """
    where = "top_versus_rest_sharpness"
    name = last_linear_layer(model, layer)
    stacked = StackedLoss(model, loss_fn, batch, params, where=where)
    f = stacked.output
    d = _check_layer(model, batch, stacked.point, name, f, where)
    if d < 3:
        raise InvalidArgumentError(
            f"{where}: needs at least 3 classes (the rest must have two to redistribute "
            f"between), the output layer has {d}"
        )
    logits = f.reshape(-1, d)
    if top_class is None:
        top_class = int(torch.bincount(logits.argmax(dim=-1), minlength=d).argmax())
    if not 0 <= top_class < d:
        raise InvalidArgumentError(f"{where}: top_class must be in [0, {d}), got {top_class}")
    eye = torch.eye(d, dtype=f.dtype, device=f.device)
    e_c = eye[top_class]
    rest = 1.0 - e_c
    generators = {
        "top": torch.outer(e_c, e_c),
        "rest": (eye - torch.outer(e_c, e_c)) - torch.outer(rest, rest) / (d - 1),
    }
    curvature: dict[str, float] = {}
    sharpness: dict[str, float] = {}
    for key, matrix in generators.items():
        e_f = _apply(matrix, f)
        curvature[key] = float(torch.sum(e_f * stacked.loss_hvp(e_f)))
        norm_sq = vector_norm(flatten(_direction(stacked.point, name, matrix))) ** 2
        sharpness[key] = _quotient(curvature[key], norm_sq)
    return TopVersusRest(
        top_class=top_class,
        top_curvature=curvature["top"],
        rest_curvature=curvature["rest"],
        top_sharpness=sharpness["top"],
        rest_sharpness=sharpness["rest"],
        ratio=_quotient(sharpness["top"], sharpness["rest"]),
        mean_top_probability=float(torch.softmax(logits, dim=-1)[:, top_class].mean()),
    )
