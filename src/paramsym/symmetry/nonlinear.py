"""Data-dependent, nonlinear GL(h) actions on a hidden layer ``U σ(V h + b)``.

A pointwise σ commutes with few linear maps, but on *given data* a much larger group acts
(dissertation §2.4, Def. 1.3.3-1.3.4, App. A.3; teleportation Eqs. 4.13, 4.16). All three
actions here move ``V ↦ g V, b ↦ g b`` (or solve for them) and compensate in U using the hidden
activations on the data, so they need the input batch ``x``: ``act(θ, g, x)``. Rows are samples
(PyTorch convention); the papers write samples as columns.

:class:`NonlinearGL` (Thm 2.4.1 / A.3.4, Ex. 1.3.5)
    One input x: ``U ↦ U R_{σ(z)} R_{σ(gz)}⁻¹`` with ``z = V h(x) + b``. Exact at x for every
    g whenever σ(z), σ(gz) ≠ 0 (σ nonzero off zero and z ≠ 0); it changes the output at other
    inputs, with the Lipschitz bound of Prop. 2.4.2. A group action: g₁·(g₂·θ) = (g₁g₂)·θ.
:class:`PseudoInverseGL` (Eqs. 2.54, 3.6, 4.16)
    A batch X: ``U ↦ U σ(H) σ(gH)⁺`` (paper's column convention, H = V X + b). Exact on the
    batch iff σ(gH) has full column rank, which needs k ≤ h samples; otherwise the output
    change is an orthogonal projection, so ‖Uσ(H) − U′σ(gH)‖ ≤ ‖Uσ(H)‖ (Prop. 3.4.1).
:class:`InverseActivationGL` (Eq. 4.13, Prop. 4.4.2)
    A batch X and invertible σ: ``[V b] ↦ σ⁻¹(g σ(H)) [h; 1]⁺, U ↦ U g⁻¹``. Exact on the batch
    iff ``[h; 1]`` (inputs with a ones row) has full column rank (k ≤ n + 1) and g σ(H) stays
    in the image of σ. It is a group action only when ``[h; 1]`` is square and invertible;
    with fewer samples the identity element projects ``[V b]`` onto the data's row space.

**R_z** (``householder_frame``): any map with ``R_z e₁ = z`` and ``R_z/|z|`` orthogonal gives
the action, because ``R_{σ(gz)}⁻¹ σ(gz) = e₁`` telescopes (notes 001a §2). paramsym uses the
Householder reflection ``R_z = |z| (I − 2uuᵀ/‖u‖²)``, ``u = z/|z| − e₁``: symmetric, O(h²) and
smooth everywhere except at z ∝ +e₁ (where it is defined as |z| I). The appendix A.3.1
spherical-coordinate form works too but is singular wherever a spherical angle is.

Each action reports whether it was exact on the data (:meth:`act_with_report`), and ``act``
warns with the measured output change when it was not (:class:`ApproximateActionWarning`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, TypeGuard

import torch
from torch import Tensor

from paramsym.core.params import Params, check_finite
from paramsym.errors import (
    ApproximateActionWarning,
    InvalidArgumentError,
    InvalidGroupElementError,
    MissingParameterError,
    ShapeError,
)
from paramsym.nn.activations import ActivationSpec
from paramsym.symmetry.base import GroupElement, Region, Symmetry
from paramsym.symmetry.gl import GeneralLinearGroup

Features = Callable[[Mapping[str, Tensor], Tensor], Tensor]
"""``(params, x) -> h``: the input to the layer's incoming weight, shape ``(k, n)``."""


def _pointwise_jvp(fn: Callable[[Tensor], Tensor], z: Tensor, direction: Tensor) -> Tensor:
    """``fn'(z) ⊙ direction``, the jvp of a pointwise ``fn`` at ``z``.

    A pointwise function has a diagonal Jacobian, so its jvp equals its VJP with the same
    vector; reverse mode computes that several times faster than ``torch.func.jvp`` on the
    small matrices of a layer pair. The result stays differentiable in ``direction`` (and in
    ``z`` when it carries a graph), as :meth:`DataDependentGL.tangent` needs for the
    teleport's pullback.
    """
    keep_graph = torch.is_grad_enabled() and (z.requires_grad or direction.requires_grad)
    with torch.enable_grad():
        leaf = z if z.requires_grad else z.detach().requires_grad_(True)
        (rate,) = torch.autograd.grad(fn(leaf), leaf, direction, create_graph=keep_graph)
    return rate


def _is_identity(g: GroupElement, width: int) -> TypeGuard[Tensor]:
    """Whether ``g`` is exactly the h × h identity (as in a teleport's rebase, ``act(θ, I)``)."""
    return (
        isinstance(g, Tensor)
        and g.shape == (width, width)
        and torch.equal(g, torch.eye(width, dtype=g.dtype, device=g.device))
    )


@dataclass(frozen=True)
class LayerPair:
    """Where a hidden layer ``U σ(c_w V h + c_b b)`` lives in a model.

    Attributes:
        incoming_weight: name of V, shape ``(h, n)``.
        incoming_bias: name of b, shape ``(h,)``, or ``None``.
        outgoing_weight: name of U, shape ``(m, h)``.
        activation: σ (pointwise).
        features: ``(params, x) -> h``, the layer's input for the network input ``x``
            (the identity for the first layer).
        weight_scale, bias_scale: constants c_w, c_b of the incoming layer (1 for
            ``nn.Linear``; the NTK factors for :class:`~paramsym.nn.NTKLinear`).
    """

    incoming_weight: str
    incoming_bias: str | None
    outgoing_weight: str
    activation: ActivationSpec
    features: Features
    weight_scale: float = 1.0
    bias_scale: float = 1.0

    @property
    def names(self) -> tuple[str, ...]:
        bias = () if self.incoming_bias is None else (self.incoming_bias,)
        return (self.incoming_weight, *bias, self.outgoing_weight)

    def inputs(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """``[c_w h, c_b 1]`` (or ``c_w h`` without bias), shape ``(k, n [+ 1])``."""
        h = self.features(params, x)
        columns = [self.weight_scale * h]
        if self.incoming_bias is not None:
            columns.append(self.bias_scale * torch.ones_like(h[:, :1]))
        return torch.cat(columns, dim=1)

    def incoming(self, params: Mapping[str, Tensor]) -> Tensor:
        """``[V b]`` (or V), shape ``(h, n [+ 1])``."""
        v = params[self.incoming_weight]
        if self.incoming_bias is None:
            return v
        return torch.cat([v, params[self.incoming_bias].unsqueeze(1)], dim=1)

    def with_incoming(self, params: Mapping[str, Tensor], stacked: Tensor, u: Tensor) -> Params:
        """``params`` with ``[V b]`` replaced by ``stacked`` and U by ``u``."""
        out = dict(params)
        n = params[self.incoming_weight].shape[1]
        out[self.incoming_weight] = stacked[:, :n]
        if self.incoming_bias is not None:
            out[self.incoming_bias] = stacked[:, n]
        out[self.outgoing_weight] = u
        return out


@dataclass
class ActionReport:
    """How exact a data-dependent action was on the data it was given.

    Attributes:
        exact: whether the hidden layer's output on the data is unchanged (up to rounding).
        batch_size: k, the number of samples.
        width: h, the hidden width.
        rank: rank of the matrix whose full rank makes the action exact (σ(gH) for the
            pseudo-inverse action, the inputs ``[h; 1]`` for the inverse-activation action,
            1 for the single-input action).
        relative_change: measured ‖new − old‖_F / ‖old‖_F of the layer's output
            ``U σ(V h + b)`` on the data.
    """

    exact: bool
    batch_size: int
    width: int
    rank: int
    relative_change: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def householder_frame(z: Tensor) -> Tensor:
    """``R_z`` with ``R_z e₁ = z`` and ``R_z / |z|`` orthogonal (and symmetric), shape ``(h, h)``.

    ``R_z = |z| (I − 2uuᵀ/‖u‖²)`` with ``u = z/|z| − e₁``; the first entry of u is computed as
    ``−Σ_{i>1} v_i² / (1 + v_1)`` to avoid cancellation. At z ∝ +e₁ (u = 0) it is ``|z| I``.
    """
    # not vector_norm: reverse mode through its forward-over-forward derivative fails
    # (in-place error, torch 2.13), which the orbit curvature objective needs
    radius = torch.sqrt((z * z).sum())
    v = z / radius
    eye = torch.eye(z.numel(), dtype=z.dtype, device=z.device)
    tail = (v[1:] ** 2).sum()
    first = torch.where(v[0] > 0, -tail / (1 + v[0]), v[0] - 1)
    u = torch.cat([first.reshape(1), v[1:]])
    norm2 = (u**2).sum()
    if float(norm2.detach()) <= torch.finfo(z.dtype).tiny:
        return radius * eye
    return radius * (eye - 2.0 * torch.outer(u, u) / norm2)


class DataDependentGL(GeneralLinearGroup, Symmetry):
    """Common part of the data-dependent GL(h) actions on one :class:`LayerPair`.

    Subclasses implement :meth:`_transform`: the new parameters and the report's rank and
    ``exact`` flag, differentiable in g and θ (so :meth:`tangent` can use ``torch.func.jvp``).
    """

    family: ClassVar[str]
    exact_on_any_data: ClassVar[bool] = False
    conditions: ClassVar[str] = ""

    def __init__(self, pair: LayerPair, width: int, *, site: str | None = None) -> None:
        self.pair = pair
        self.width = int(width)
        self.site = (
            site
            or f"{pair.incoming_weight.rsplit('.', 1)[0]}->{pair.outgoing_weight.rsplit('.', 1)[0]}"
        )
        super().__init__(
            name=f"{self.family}[{self.site}]",
            group=f"GL({width})",
            dim=width * width,
            exact=self.exact_on_any_data,
            data_dependent=True,
            linear=False,
            notes=(self.conditions,),
        )

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self.pair.names

    @property
    def touched_regions(self) -> frozenset[Region]:
        p = self.pair
        regions: set[Region] = {(p.incoming_weight, 0, 0, None), (p.outgoing_weight, 1, 0, None)}
        if p.incoming_bias is not None:
            regions.add((p.incoming_bias, 0, 0, None))
        return frozenset(regions)

    # -- validation ------------------------------------------------------------------------
    def _check(self, params: Mapping[str, Tensor], x: Tensor | None) -> Tensor:
        for name in self.pair.names:
            if name not in params:
                raise MissingParameterError(
                    f"{self.name} acts on parameter '{name}', which is not in params"
                )
        v, u = params[self.pair.incoming_weight], params[self.pair.outgoing_weight]
        if v.shape[0] != self.width or u.shape[1] != self.width:
            raise ShapeError(
                f"{self.name}: '{self.pair.incoming_weight}' {tuple(v.shape)} and "
                f"'{self.pair.outgoing_weight}' {tuple(u.shape)} do not have hidden width "
                f"{self.width}"
            )
        check_finite(((n, params[n]) for n in self.pair.names), self.name)
        if not isinstance(x, Tensor):
            raise InvalidArgumentError(
                f"{self.name} is data-dependent: pass the input batch, act(params, g, x=...)"
            )
        check_finite([("x", x)], self.name)
        return x

    # -- action ----------------------------------------------------------------------------
    def act_with_report(
        self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None
    ) -> tuple[Params, ActionReport]:
        """``g·θ`` on the data ``x`` together with how exact it was there."""
        new, rank, exact, x = self._validated_transform(params, g, x)
        return new, self._report(params, new, x, rank, exact)

    def _validated_transform(
        self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None
    ) -> tuple[Params, Tensor, Tensor, Tensor]:
        x = self._check(params, x)
        if not _is_identity(g, self.width):  # validating g costs an h × h inverse
            g = self.check_element(g)
        ref = params[self.pair.incoming_weight]
        g = g.to(dtype=ref.dtype, device=ref.device)
        new, rank, exact = self._transform(params, g, x)
        return new, rank, exact, x

    def _report(
        self,
        params: Mapping[str, Tensor],
        new: Mapping[str, Tensor],
        x: Tensor,
        rank: Tensor,
        exact: Tensor,
    ) -> ActionReport:
        """How exact the move ``params → new`` was on ``x``: the relative change of σ(H)Uᵀ."""
        with torch.no_grad():
            before = self._layer_output(params, x)
            change = torch.linalg.norm(self._layer_output(new, x) - before)
            change = float(change / torch.linalg.norm(before).clamp_min(1e-300))
        return ActionReport(
            exact=bool(exact),
            batch_size=int(self._batch(x).shape[0]),
            width=self.width,
            rank=int(rank),
            relative_change=change,
        )

    def act(self, params: Mapping[str, Tensor], g: GroupElement, x: Tensor | None = None) -> Params:
        """``g·θ`` on ``x``; warns (:class:`ApproximateActionWarning`) with the layer output's
        relative change when the action is not exact on this batch."""
        new, rank, exact, x = self._validated_transform(params, g, x)
        if bool(exact):
            return new  # the output change is only measured where it can be nonzero
        report = self._report(params, new, x, rank, exact)
        if not report.exact:
            warnings.warn(
                f"{self.name}: not exact on this batch (k={report.batch_size} samples, hidden "
                f"width {report.width}, rank {report.rank}); the layer's output on the batch "
                f"changed by {report.relative_change:.3e} (relative)",
                ApproximateActionWarning,
                stacklevel=2,
            )
        return new

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """``d/dt act(θ, exp(tξ), x)`` at t = 0, by ``torch.func.jvp`` through the action
        (subclasses with a closed form override this; this is their test oracle)."""
        return self.jvp_tangent(params, xi, x)

    def jvp_tangent(
        self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None
    ) -> Params:
        """The tangent by forward-mode autodiff through :meth:`_transform`."""
        xi = self.check_xi(xi)
        x = self._check(params, x)

        def moved(z: Tensor) -> Params:
            return self._transform(params, self.exp(z), x)[0]

        rate = torch.func.jvp(moved, (torch.zeros_like(xi),), (xi,))[1]
        return dict(rate)

    def _tangent_parts(
        self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """(the algebra element Ξ in the parameters' dtype, the validated batch)."""
        xi = self.check_xi(xi)
        x = self._check(params, x)
        ref = params[self.pair.incoming_weight]
        return self._algebra(xi.to(dtype=ref.dtype, device=ref.device)), x

    def _tangent_dict(self, params: Mapping[str, Tensor], stacked: Tensor, u: Tensor) -> Params:
        """A tangent: ``stacked`` on [V b], ``u`` on U, zero elsewhere."""
        zeros = {k: torch.zeros_like(t) for k, t in params.items()}
        return self.pair.with_incoming(zeros, stacked, u)

    # -- pieces ----------------------------------------------------------------------------
    def _batch(self, x: Tensor) -> Tensor:
        return x

    def _preactivation(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """H = [c_w h, c_b 1] [V b]ᵀ, shape ``(k, h)``."""
        return self.pair.inputs(params, self._batch(x)) @ self.pair.incoming(params).T

    def _layer_output(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        """``σ(H) Uᵀ``, the hidden layer's contribution to the next pre-activation."""
        hidden = self.pair.activation(self._preactivation(params, x))
        return hidden @ params[self.pair.outgoing_weight].T

    def _transform(
        self, params: Mapping[str, Tensor], g: Tensor, x: Tensor
    ) -> tuple[Params, Tensor, Tensor]:
        """(new params, rank, exact), differentiable in g and θ (``tangent`` uses jvp)."""
        raise NotImplementedError


class NonlinearGL(DataDependentGL):
    """The single-input nonlinear GL(h) action (Thm 2.4.1, A.3.4), exact at its input.

    ``V ↦ g V, b ↦ g b, U ↦ U R_{σ(z)} R_{σ(gz)}⁻¹`` with z the pre-activation at the one
    input ``x`` (shape ``(n0,)`` or ``(1, n0)``). Needs σ(z) ≠ 0 and σ(gz) ≠ 0.
    """

    family = "nonlinear_GL"
    exact_on_any_data = True
    conditions = "exact at its one input x, where σ(Vx + b) ≠ 0; changes the output elsewhere"

    def _batch(self, x: Tensor) -> Tensor:
        x = x.unsqueeze(0) if x.ndim == 1 else x
        if x.shape[0] != 1:
            raise ShapeError(
                f"{self.name} acts at one input; got a batch of {x.shape[0]}. Use "
                "PseudoInverseGL or InverseActivationGL for batches"
            )
        return x

    def _transform(
        self, params: Mapping[str, Tensor], g: Tensor, x: Tensor
    ) -> tuple[Params, Tensor, Tensor]:
        z = self._preactivation(params, x)[0]
        a, b = self.pair.activation(z), self.pair.activation(g @ z)
        if (
            float(torch.linalg.vector_norm(a.detach())) == 0.0
            or float(torch.linalg.vector_norm(b.detach())) == 0.0
        ):
            raise InvalidArgumentError(
                f"{self.name}: σ(Vx + b) or σ(g(Vx + b)) is zero at this input, where the "
                "nonlinear action is undefined (it needs σ nonzero off zero and Vx + b ≠ 0)"
            )
        frame_a, frame_b = householder_frame(a), householder_frame(b)
        inv_frame_b = frame_b.T / (b @ b)  # R⁻¹ = Rᵀ/|z|²
        u = params[self.pair.outgoing_weight] @ frame_a @ inv_frame_b
        new = self.pair.with_incoming(params, g @ self.pair.incoming(params), u)
        return new, torch.tensor(1), torch.tensor(True)


class PseudoInverseGL(DataDependentGL):
    """The batch action with a pseudo-inverse (Eqs. 2.54, 3.6, 4.16), exact iff σ(gH) has
    full column rank on the batch (k ≤ h); otherwise it reports and warns the output change,
    which Prop. 3.4.1 bounds by ‖U σ(H)‖."""

    family = "pinv_GL"
    conditions = "exact on a batch iff σ(g(VX + b)) has full column rank (k ≤ h samples)"

    def _transform(
        self, params: Mapping[str, Tensor], g: Tensor, x: Tensor
    ) -> tuple[Params, Tensor, Tensor]:
        h = self._preactivation(params, x)  # (k, h)
        s, s_g = self.pair.activation(h), self.pair.activation(h @ g.T)
        # U' = U (σ(gH)⁺ σ(H))ᵀ in row convention, multiplied as (U σ(H)ᵀ) σ(gH)⁺ᵀ: O(m h k)
        u = (params[self.pair.outgoing_weight] @ s.T) @ torch.linalg.pinv(s_g).T
        new = self.pair.with_incoming(params, g @ self.pair.incoming(params), u)
        rank = torch.linalg.matrix_rank(s_g)
        return new, rank, rank == s_g.shape[0]

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """Closed form, from the derivative of the pseudo-inverse at constant rank (Golub and
        Pereyra 1973): with S = σ(H), P = S⁺S and D = σ'(H) ⊙ (H Ξᵀ),
        ``δ[V b] = Ξ [V b]``, ``δU = U δMᵀ``, ``δM = −S⁺ D P + (I − P) Dᵀ S⁺ᵀ``.
        Matrix products only (no Jacobian of the pseudo-inverse), ordered so that no h × h
        matrix is formed for U: U δMᵀ = −(U P) Dᵀ S⁺ᵀ + (U S⁺)(D − (D S⁺) S), O(m h k).
        Equal to :meth:`jvp_tangent` (tested)."""
        generator, x = self._tangent_parts(params, xi, x)
        h = self._preactivation(params, x)
        s = self.pair.activation(h)  # (k, h)
        s_pinv = torch.linalg.pinv(s)  # (h, k)
        d = _pointwise_jvp(self.pair.activation, h, h @ generator.T)
        u = params[self.pair.outgoing_weight]
        u_projected = (u @ s.T) @ s_pinv.T  # U P
        du = -((u_projected @ d.T) @ s_pinv.T) + (u @ s_pinv) @ (d - (d @ s_pinv) @ s)
        stacked = generator @ self.pair.incoming(params)
        return self._tangent_dict(params, stacked, du)


class InverseActivationGL(DataDependentGL):
    """The batch action through σ⁻¹ (Eq. 4.13, Prop. 4.4.2), for invertible σ.

    Exact iff the layer inputs ``[h; 1]`` have full column rank (k ≤ n + 1) and gσ(H) lies in
    the image of σ (for tanh/sigmoid this bounds g); a group action only for square inputs.
    """

    family = "inverse_GL"
    conditions = (
        "exact on a batch iff the inputs [h; 1] have full column rank (k ≤ n + 1) and g σ(H) "
        "stays in σ's image; a group action only for k = n + 1"
    )

    def _transform(
        self, params: Mapping[str, Tensor], g: Tensor, x: Tensor
    ) -> tuple[Params, Tensor, Tensor]:
        inverse = self.pair.activation.inverse
        assert inverse is not None
        inputs = self.pair.inputs(params, self._batch(x))  # (k, n + 1)
        target = inverse(self.pair.activation(inputs @ self.pair.incoming(params).T) @ g.T)
        if not bool(torch.isfinite(target).all()):
            raise InvalidGroupElementError(
                f"{self.name}: g σ(H) leaves the image of {self.pair.activation.name}, so "
                "σ⁻¹ is undefined; use a group element closer to the identity"
            )
        stacked = (
            torch.linalg.pinv(inputs) @ target
        ).T  # [V b]' solves inputs [V b]'ᵀ = σ⁻¹(g σ(H))
        u = torch.linalg.solve(g.T, params[self.pair.outgoing_weight].T).T  # U g⁻¹
        new = self.pair.with_incoming(params, stacked, u)
        rank = torch.linalg.matrix_rank(inputs)
        return new, rank, rank == inputs.shape[0]

    def tangent(self, params: Mapping[str, Tensor], xi: Tensor, x: Tensor | None = None) -> Params:
        """Closed form: with A = σ(H), ``δ[V b] = (X⁺ ((σ⁻¹)'(A) ⊙ (A Ξᵀ)))ᵀ`` and
        ``δU = −U Ξ``; equal to :meth:`jvp_tangent` (tested)."""
        generator, x = self._tangent_parts(params, xi, x)
        inverse = self.pair.activation.inverse
        assert inverse is not None
        inputs = self.pair.inputs(params, self._batch(x))
        hidden = self.pair.activation(inputs @ self.pair.incoming(params).T)
        rate = _pointwise_jvp(inverse, hidden, hidden @ generator.T)
        stacked = (torch.linalg.pinv(inputs) @ rate).T
        u = -params[self.pair.outgoing_weight] @ generator
        return self._tangent_dict(params, stacked, u)
