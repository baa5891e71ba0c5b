"""Conserved quantities of linear symmetries: Q_M(θ) = ⟨θ, M·θ⟩, all at once (§2.5, App. A.2).

For a symmetry acting linearly on the parameters, with infinitesimal action
``A(ξ)θ = symmetry.tangent(θ, ξ)`` (ξ: coordinates in the Lie algebra), every loss the action
preserves satisfies ⟨∇L(θ), A(ξ)θ⟩ = 0 (Prop 2.3.9). When the generators are closed under
transposition, A(ξ)ᵀ = A(ξ′), the quantity

    Q_ξ(θ) = ⟨θ, A(ξ)θ⟩                                                    (Prop 2.5.1)

is constant along gradient flow: dQ_ξ/dt = −⟨∇L, (A(ξ) + A(ξ)ᵀ)θ⟩ = 0. Q_ξ is linear in ξ, so
all of them are one vector of algebra coordinates, the **moment map** μ(θ) with
Q_ξ(θ) = ⟨μ(θ), ξ⟩ (Cor A.2.12): :func:`moment_map`. Antisymmetric generators give Q ≡ 0, so
O(h) has no conserved quantity, only the angular-momentum identity
(:func:`~paramsym.conserved.angular_momentum`).

Two ways to compute μ (``method=``):

``"generic"``
    One vector-Jacobian product through ``symmetry.tangent``: μ = ∇_ξ ⟨θ, A(ξ)θ⟩. Works for any
    linear symmetry; for a family without a closed form the transposition condition is first
    checked numerically (:func:`conservation_residual`).
``"closed_form"`` (what ``"auto"`` picks when it exists)
    The Gram matrices of the parameters a hidden layer's neurons own. A slot with power p
    (+1: ``g·T``, −1: ``T·g⁻¹``; −α for the outgoing weight of a degree-α activation) and
    neuron-major matrix R contributes p·R Rᵀ:

    * GL(h) families (linear hidden layers, LoRA, attention Q-K and V-O): the full h×h
      **imbalance** ``μ_i = W_i W_iᵀ + b_i b_iᵀ − W_{i+1}ᵀ W_{i+1}`` (App. A.2.9; Ex. 2.5.3
      writes VVᵀ − UᵀU). Every entry is conserved.
    * Positive scaling of a degree-α activation: ``diag[W_i W_iᵀ + b_i b_iᵀ − α W_{i+1}ᵀ
      W_{i+1}]`` (Ex. 2.5.4: diag[VVᵀ − αUᵀU]), one value per neuron; BatchNorm/LayerNorm
      scale invariance gives the squared norms of the rows (or of the whole weight) alone.

Sign convention: "incoming minus outgoing", as in App. A.2.9. The dissertation also writes
½Tr[UᵀU − VVᵀ] (Eq. 2.14), which is −½ tr μ for a two-layer net (notes 001a §9.1);
:meth:`~paramsym.conserved.ConservedQuantity.trace` gives tr μ.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn

from paramsym.conserved.base import ConservedQuantity, slot_rows
from paramsym.conserved.translation import TranslationCharge
from paramsym.core.params import Params, check_finite, flatten, inner, resolve_params, to_dtype
from paramsym.curvature import tangent_matrix
from paramsym.errors import ApproximateConservationWarning, InvalidArgumentError
from paramsym.symmetry.base import Symmetry
from paramsym.symmetry.detect import symmetries as find_symmetries
from paramsym.symmetry.gl import GeneralLinearGroup, MatrixNeuronSymmetry
from paramsym.symmetry.orthogonal import OrthogonalGroup
from paramsym.symmetry.product import ProductSymmetry
from paramsym.symmetry.scaling import PositiveScaling

Method = Literal["auto", "closed_form", "generic"]
Family = Literal["gl", "scaling", "product", "generic"]

CERTIFICATE_TOLERANCE = 1e-8
"""Largest relative residual :func:`conservation_residual` accepts (computed in float64)."""


def _has_full_gl_algebra(symmetry: Symmetry) -> bool:
    """GL(h) acting through slots with the whole gl(h) as algebra (not a subalgebra such as
    the stabiliser of a distribution symmetry, which is not closed under transposition)."""
    return (
        isinstance(symmetry, MatrixNeuronSymmetry)
        and isinstance(symmetry, GeneralLinearGroup)
        and type(symmetry)._algebra is GeneralLinearGroup._algebra
    )


def family_of(symmetry: Symmetry) -> Family:
    """Which closed form of μ applies, after checking that Prop 2.5.1 applies at all.

    Raises :class:`~paramsym.errors.InvalidArgumentError` naming the symmetry for discrete
    groups, nonlinear or data-dependent actions, distribution symmetries and orthogonal groups;
    for constant translations (whose conserved quantities are linear:
    :class:`~paramsym.conserved.translation.TranslationCharge`) and for the translations whose
    directions depend on parameters they read (no Noether charge: see
    :mod:`~paramsym.conserved.translation`).
    """
    what = f"conserved quantities of {symmetry.name} ({symmetry.group})"
    if isinstance(symmetry, ProductSymmetry):
        for factor in symmetry.factors:
            family_of(factor)
        return "product"
    if symmetry.dim == 0:
        raise InvalidArgumentError(
            f"{what}: a discrete group has no Lie algebra and no conserved quantities; pass a "
            "continuous symmetry (GL, rescaling, LoRA/attention GL)"
        )
    if symmetry.reads and not symmetry.data_dependent:
        raise InvalidArgumentError(
            f"{what}: it moves parameters by amounts that depend on parameters it reads and "
            f"leaves fixed ({', '.join(symmetry.reads)}), so its generator field is not a "
            "gradient field (nor is any combination of it), and gradient flow has no Noether "
            "charge for it"
        )
    if symmetry.translation and not symmetry.data_dependent:
        raise InvalidArgumentError(
            f"{what}: a translation by fixed directions w_k conserves the linear ⟨θ, w_k⟩, not "
            "a quadratic Q_M; use TranslationCharge (ps.conserved_quantities returns it)"
        )
    if symmetry.data_dependent or not symmetry.linear:
        raise InvalidArgumentError(
            f"{what}: Prop 2.5.1 needs an action that is linear in the parameters, and this "
            "one is not (data-dependent, nonlinear or affine). For a two-layer net with whitened "
            "input, ElementwiseQ gives the conserved quantity of any elementwise activation"
        )
    if symmetry.preserves == "distribution":
        raise InvalidArgumentError(
            f"{what}: a distribution symmetry preserves an expectation over the data, not the "
            "training loss, so gradient flow does not conserve its Q_M"
        )
    if isinstance(symmetry, OrthogonalGroup):
        raise InvalidArgumentError(
            f"{what}: the Lie algebra so(h) is antisymmetric, so every Q_M = ⟨θ, Mθ⟩ is "
            "identically zero (Cor A.2.12); use paramsym.conserved.angular_momentum for the "
            "identity gradient flow satisfies instead (Thm 2.5.6)"
        )
    if isinstance(symmetry, PositiveScaling):
        return "scaling"
    if _has_full_gl_algebra(symmetry):
        return "gl"
    return "generic"


# -- the two computations ------------------------------------------------------------------------


def _generic_pullback(
    symmetry: Symmetry, params: Mapping[str, Tensor], x: Tensor | None
) -> tuple[Params, object]:
    """(params as a dict, the pullback ξ-cotangent of ξ ↦ A(ξ)θ), by one ``torch.func.vjp``."""
    point = dict(params)
    ref = point[symmetry.parameter_names[0]]
    zero = torch.zeros(symmetry.dim, dtype=ref.dtype, device=ref.device)
    pullback = torch.func.vjp(lambda xi: symmetry.tangent(point, xi, x), zero)[1]
    return point, pullback


def _generic_moment(
    symmetry: Symmetry, params: Mapping[str, Tensor], x: Tensor | None = None
) -> Tensor:
    """μ = ∇_ξ ⟨θ, A(ξ)θ⟩, shape ``(dim,)``: one pass through the tangent, one back."""
    point, pullback = _generic_pullback(symmetry, params, x)
    (mu,) = pullback(point)  # type: ignore[operator]
    return mu


def _generic_contributions(
    symmetry: Symmetry, params: Mapping[str, Tensor], x: Tensor | None = None
) -> list[Tensor]:
    """μ split by parameter tensor: ⟨θ_p, (A(ξ)θ)_p⟩ for each parameter p the action moves."""
    point, pullback = _generic_pullback(symmetry, params, x)
    parts = []
    for name in symmetry.parameter_names:
        cotangent = {k: (t if k == name else torch.zeros_like(t)) for k, t in point.items()}
        parts.append(pullback(cotangent)[0])  # type: ignore[operator]
    return parts


def _slot_contributions(symmetry: Symmetry, params: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Closed form, per parameter: Σ over its slots of p·R Rᵀ (GL, shape (h, h)) or of
    p·‖R_k‖² (per-neuron scaling, shape (h,); one common scale: shape (1,))."""
    assert isinstance(symmetry, (MatrixNeuronSymmetry, PositiveScaling))
    symmetry.check_params(params)
    width = symmetry.width
    parts: dict[str, Tensor] = {}
    for slot in symmetry.slots:
        if isinstance(symmetry, PositiveScaling) and not symmetry.per_neuron:
            t = params[slot.name]
            term = (slot.power * (t * t).sum()).reshape(1)
        else:
            rows = slot_rows(params, slot, width)
            if isinstance(symmetry, PositiveScaling):
                term = slot.power * (rows * rows).sum(dim=1)
            else:
                term = slot.power * (rows @ rows.T)
        parts[slot.name] = parts[slot.name] + term if slot.name in parts else term
    return parts


# -- public functions ---------------------------------------------------------------------------


def noether_charge(
    symmetry: Symmetry, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None
) -> Tensor:
    """Q_M(θ) = ⟨θ, M·θ⟩ for the algebra element M with coordinates ``xi`` (Prop 2.5.1).

    The definition, literally (one tangent and one inner product): a 0-d tensor. It is
    conserved when M's symmetric part lies in the algebra; :func:`moment_map` gives all of
    them at once (``noether_charge(s, θ, ξ) == moment_map(s, θ) @ ξ``).
    """
    return inner(dict(params), symmetry.tangent(dict(params), xi, x))


def conservation_residual(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    x: Tensor | None = None,
    *,
    rtol: float | None = None,
) -> float:
    """How far the quantities Q_ξ of ``symmetry`` are from being conserved, at θ.

    Q is conserved by the gradient flow of every loss the action preserves iff ∇Q(θ) lies in
    the tangent space of the orbit (the gradients of invariant losses span its orthogonal
    complement). For each algebra basis element e_k this computes ∇Q_k = (A_k + A_kᵀ)θ with one
    tangent and one VJP, projects the rows onto the row space of the tangent matrix (rank with
    :func:`~paramsym.orbit_dimension`'s rule) and returns ``max_k ‖residual_k‖ / max_k ‖∇Q_k‖``
    in float64: about 1e-15 for closed families (GL, rescaling), O(1) when the generators are
    not closed under transposition. 0.0 when every Q_k vanishes identically (so(h)).

    Cost: ``dim`` tangents and VJPs and an SVD of the ``(dim, P)`` tangent matrix (small models).
    """
    point = to_dtype(dict(params), torch.float64)
    matrix = tangent_matrix(symmetry, point, x, dtype=torch.float64)
    gradients = []
    for row, basis in zip(matrix, torch.eye(symmetry.dim, dtype=torch.float64), strict=True):
        pullback = torch.func.vjp(lambda p, e=basis: symmetry.tangent(p, e, x), point)[1]
        (adjoint,) = pullback(point)
        gradients.append(row + flatten(adjoint))
    if not gradients:
        return 0.0
    grad_q = torch.stack(gradients)
    largest = float(torch.linalg.vector_norm(grad_q, dim=1).max())
    if largest == 0.0:
        return 0.0
    _, singular, right = torch.linalg.svd(matrix, full_matrices=False)
    threshold = (
        rtol if rtol is not None else max(matrix.shape) * torch.finfo(torch.float64).eps
    ) * (singular[0] if singular.numel() else 0.0)
    basis = right[singular > threshold]
    residual = grad_q - (grad_q @ basis.T) @ basis
    return float(torch.linalg.vector_norm(residual, dim=1).max()) / largest


class MomentMap(ConservedQuantity):
    """All conserved quantities of one linear symmetry: μ(θ) with Q_ξ(θ) = ⟨μ(θ), ξ⟩.

    Args:
        symmetry: a continuous symmetry acting linearly on the parameters (GL(h) of a linear
            layer, positive rescaling, normalisation scale invariance, LoRA or attention GL,
            or a product of those). Others raise, naming the reason (see :func:`family_of`).
        method: ``"auto"`` (closed form where one exists), ``"closed_form"`` or ``"generic"``
            (see the module docstring).
        check_params: for a family without a closed form (a user's own linear symmetry),
            a point at which :func:`conservation_residual` must be below 1e-8 before μ is
            trusted as a conserved quantity; required for such families.
        x: the input batch, for symmetries whose ``tangent`` needs it (none of the linear ones
            in the catalogue).

    An approximate symmetry (``symmetry.exact`` false, e.g. BatchNorm with eps > 0) gives an
    approximately conserved μ: construction warns (:class:`ApproximateConservationWarning`)
    and ``exact`` is false.

    Calling it returns μ(θ) shaped like the algebra: ``(h, h)`` for GL(h), ``(h,)`` for a
    per-neuron rescaling, ``(1,)`` for one common scale, ``(dim,)`` (the factors' coordinates
    concatenated) for products and generic families.

    >>> import torch, paramsym as ps
    >>> model = ps.mlp([3, 4, 2], activation="identity", seed=0)
    >>> mu = MomentMap(ps.symmetries(model)[0])
    >>> theta = ps.params_of(model)
    >>> W1, b1, W2 = theta["0.weight"], theta["0.bias"], theta["2.weight"]
    >>> torch.allclose(mu(theta), W1 @ W1.T + torch.outer(b1, b1) - W2.T @ W2)
    True
    """

    quadratic = True

    def __init__(
        self,
        symmetry: Symmetry,
        *,
        method: Method = "auto",
        check_params: Mapping[str, Tensor] | None = None,
        x: Tensor | None = None,
    ) -> None:
        if method not in ("auto", "closed_form", "generic"):
            raise InvalidArgumentError(
                f"MomentMap: method must be 'auto', 'closed_form' or 'generic', got {method!r}"
            )
        self.symmetry = symmetry
        self.family = family_of(symmetry)
        self.x = x
        self.name = f"moment[{symmetry.name}]"
        self.factors: tuple[Symmetry, ...] = (
            symmetry.factors if isinstance(symmetry, ProductSymmetry) else (symmetry,)
        )
        closed = all(family_of(f) in ("gl", "scaling") for f in self.factors)
        if method == "closed_form" and not closed:
            raise InvalidArgumentError(
                f"MomentMap({symmetry.name}): no closed form for this family; use "
                "method='generic' (or 'auto')"
            )
        self.method: Literal["closed_form", "generic"] = (
            "closed_form" if closed and method != "generic" else "generic"
        )
        self.exact = symmetry.exact
        if not self.exact:
            warnings.warn(
                f"{symmetry.name} is an approximate symmetry ({'; '.join(symmetry.notes)}), so "
                f"gradient flow conserves its moment map only approximately",
                ApproximateConservationWarning,
                stacklevel=2,
            )
        if not closed:
            if check_params is None:
                raise InvalidArgumentError(
                    f"MomentMap({symmetry.name}): paramsym has no proof that the generators of "
                    "this family are closed under transposition (which Prop 2.5.1 needs); pass "
                    "check_params=<a generic parameter point> to verify it numerically"
                )
            residual = conservation_residual(symmetry, check_params, x)
            if residual > CERTIFICATE_TOLERANCE:
                raise InvalidArgumentError(
                    f"MomentMap({symmetry.name}): the quantities ⟨θ, M·θ⟩ are not conserved: "
                    f"their gradients leave the orbit's tangent space (relative residual "
                    f"{residual:.2e} > {CERTIFICATE_TOLERANCE:g}), because the generators are "
                    "not closed under transposition"
                )

    def _shape(self, factor: Symmetry) -> tuple[int, ...]:
        if family_of(factor) == "gl":
            width = factor.width  # type: ignore[attr-defined]
            return (width, width)
        return (factor.dim,)

    def contributions(self, params: Mapping[str, Tensor]) -> list[Tensor]:
        """μ split into the terms of the parameter tensors (per factor for a product), each
        shaped like the factor's algebra; they sum to μ factor by factor."""
        parts: list[Tensor] = []
        for factor in self.factors:
            if self.method == "closed_form":
                parts.extend(_slot_contributions(factor, params).values())
            else:
                shape = self._shape(factor)
                parts.extend(
                    p.reshape(shape) for p in _generic_contributions(factor, params, self.x)
                )
        return parts

    def __call__(self, params: Mapping[str, Tensor]) -> Tensor:
        check_finite(
            ((n, params[n]) for n in self.symmetry.parameter_names if n in params), self.name
        )
        values = []
        for factor in self.factors:
            if self.method == "closed_form":
                value = torch.stack(list(_slot_contributions(factor, params).values())).sum(0)
            else:
                value = _generic_moment(factor, params, self.x).reshape(self._shape(factor))
            values.append(value)
        if self.family in ("gl", "scaling"):
            return values[0]
        return torch.cat([v.reshape(-1) for v in values])

    def split(self, value: Tensor) -> list[Tensor]:
        """A value of μ as one tensor per factor, each shaped like the factor's algebra."""
        flat = value.reshape(-1)
        sizes = [f.dim for f in self.factors]
        return [
            part.reshape(self._shape(f))
            for part, f in zip(torch.split(flat, sizes), self.factors, strict=True)
        ]

    def trace(self, value: Tensor) -> Tensor:
        """Σ over factors of tr μ (GL) or Σ μ_k (scaling): the scalar Q of the factors' scalar
        subgroup (for one hidden layer, ‖W_i‖² + ‖b_i‖² − α‖W_{i+1}‖²)."""
        return torch.stack([super(MomentMap, self).trace(v) for v in self.split(value)]).sum()

    def magnitude(self, params: Mapping[str, Tensor]) -> Tensor:
        return torch.stack([torch.linalg.vector_norm(p) for p in self.contributions(params)]).sum()


def as_quantity(
    quantity: Symmetry | ConservedQuantity, params: Mapping[str, Tensor] | None = None
) -> ConservedQuantity:
    """A :class:`ConservedQuantity` as given, or the :class:`MomentMap` of a symmetry
    (checked numerically at ``params`` when its family has no closed form), or the
    :class:`~paramsym.conserved.translation.TranslationCharge` of a constant translation."""
    if isinstance(quantity, ConservedQuantity):
        return quantity
    if isinstance(quantity, Symmetry):
        if quantity.translation and not quantity.reads and not quantity.data_dependent:
            return TranslationCharge(quantity)
        return MomentMap(quantity, check_params=params)
    raise InvalidArgumentError(
        "expected a Symmetry or a ConservedQuantity (MomentMap, ElementwiseQ), got "
        f"{type(quantity).__name__}"
    )


def moment_map(
    symmetry: Symmetry,
    params: Mapping[str, Tensor],
    x: Tensor | None = None,
    *,
    method: Method = "auto",
) -> Tensor:
    """μ(θ) in the flat algebra coordinates of ``symmetry``, shape ``(dim,)``: entry k is the
    conserved quantity ⟨θ, A(e_k)θ⟩ of basis element e_k (Prop 2.5.1, Cor A.2.12)."""
    return MomentMap(symmetry, method=method, check_params=params, x=x)(params).reshape(-1)


def conserved_quantities(
    model: nn.Module,
    symmetry: Symmetry,
    params: Mapping[str, Tensor] | None = None,
    *,
    method: Method = "auto",
) -> Tensor:
    """Every conserved quantity of gradient flow that the linear ``symmetry`` (or constant
    translation) gives, at once.

    Returns μ(θ) shaped like the algebra (see :class:`MomentMap`): for GL(h) of a linear hidden
    layer the h×h imbalance ``W_i W_iᵀ + b_i b_iᵀ − W_{i+1}ᵀ W_{i+1}`` (App. A.2.9), for the
    rescaling of a degree-α activation the vector ``diag[W_i W_iᵀ + b_i b_iᵀ − α W_{i+1}ᵀ
    W_{i+1}]`` (Ex. 2.5.4). Q_M for a symmetric M in the algebra is ``⟨μ, M⟩``. For a
    translation by fixed directions θ ↦ θ + Σ_k t_k w_k (``symmetry.translation``: key
    biases, token/position table sums, the stream's mean, the softmax translation), the
    vector ``(⟨θ, w_k⟩)_k`` (:class:`~paramsym.conserved.translation.TranslationCharge`:
    dQ_k/dt = −⟨∇L, w_k⟩ = 0). The absorbed translations whose directions depend on
    parameters they read have none and are refused, saying why.

    Args:
        model: the network (for the default ``params``).
        symmetry: one of ``ps.symmetries(model)`` (or a product of them).
        params: the point θ (default: the model's parameters).
        method: ``"auto"``, ``"closed_form"`` or ``"generic"`` (module docstring).
    """
    point = resolve_params(model, params)
    if symmetry.translation and not symmetry.reads and not symmetry.data_dependent:
        return TranslationCharge(symmetry)(point)
    return MomentMap(symmetry, method=method, check_params=point)(point)


def imbalance(
    model: nn.Module, params: Mapping[str, Tensor] | None = None, example_input: Any = None
) -> dict[str, Tensor]:
    """The closed-form conserved quantities of every hidden layer of ``model``, by symmetry name.

    For each symmetry ``ps.symmetries(model)`` finds that has a closed-form moment map: GL(h)
    layers give the h×h imbalance ``μ_i = W_i W_iᵀ + b_i b_iᵀ − W_{i+1}ᵀ W_{i+1}`` (every
    entry conserved), rescalings the per-neuron vector ``diag[W_i W_iᵀ + b_i b_iᵀ − α
    W_{i+1}ᵀ W_{i+1}]``, normalisation scalings the squared row norms; LoRA and attention GL
    groups their own Gram differences. Hidden layers with no linear continuous symmetry
    (tanh, sigmoid, radial) do not appear. ``example_input``: a batch, to find the symmetries
    on the traced graph (CNNs, ResNets, transformers; see :func:`paramsym.symmetries`).

    >>> import paramsym as ps
    >>> {k: tuple(v.shape) for k, v in imbalance(ps.mlp([3, 5, 4, 2], "relu", seed=0)).items()}
    {'rescaling[0->2]': (5,), 'rescaling[2->4]': (4,)}
    """
    point = resolve_params(model, params)
    found: dict[str, Tensor] = {}
    for symmetry in find_symmetries(model, example_input=example_input):
        try:
            family = family_of(symmetry)
        except InvalidArgumentError:
            continue  # discrete, affine, orthogonal: no quadratic conserved quantity
        if family in ("gl", "scaling"):
            found[symmetry.name] = MomentMap(symmetry, method="closed_form")(point)
    return found
